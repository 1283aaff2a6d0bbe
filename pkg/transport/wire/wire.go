// Package wire is the coordinator-worker protocol's bytes: the chunks
// every NATS message is, and the messages they carry. It does no I/O.
//
// Every NATS message is one chunk: a fixed 40-byte little-endian header
// (version, kind, job, round, shard, chunk number and count, payload length,
// CRC-32C of the payload) and a payload slice. Logical messages larger than
// the server's max_payload are split into chunks and put back together by
// an Assembler, so vectors of any size cross a default server.
//
// Subjects:
//
//	osgm.hb             workers' heartbeats (JSON), every half second by default
//	osgm.hello          a coordinator's call for heartbeats (any payload)
//	osgm.w.<worker>     commands to one worker (Assign, JSON; Solve), and probes
//	osgm.j.<job>.down   evaluation points, broadcast to the job's workers
//	osgm.j.<job>.up     shard descriptions, partial sums, errors, and placed problems' progress and ends
//	osgm.j.<job>.sum.<worker>  sums relayed to the worker that adds them (see Point.Owners)
package wire

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"sync"
)

// Version is the wire format's version byte; a peer speaking another is
// ignored (and counted).
const Version = 14

// HeaderSize is the size of the fixed chunk header.
const HeaderSize = 40

// Kind is what a logical message carries.
type Kind uint8

const (
	KindPoint      Kind = 1 + iota // coordinator: point of a round (Shard: its version in the round, see Assembler)
	KindPartial                    // worker: one shard's partial sums
	KindMeta                       // worker: one shard's description
	KindAssign                     // coordinator: the shards a worker holds (Round: the assignment's number)
	KindHeartbeat                  // worker: alive, and what it holds (Round: its number, Shard: the worker's random tag)
	KindError                      // worker: a shard failed to load
	KindGroup                      // worker: a whole group's sum (Shard is the group)
	KindNeedX                      // worker: the round's point came without x, and this worker does not hold it
	KindProbe                      // coordinator: is this worker still connected? (workers ignore it; see Cluster.probe)
	KindSolve                      // coordinator: minimise a whole problem (Solve; Round is the placement)
	KindSolveStop                  // coordinator: stop that placement, saving its state (Round)
	KindSolving                    // worker: a placement's progress (Solving; Round is the placement, Shard the message's number)
	KindSolved                     // worker: a placement's end (Solved; numbered as Solving)
	KindRelayNode                  // worker: a node's dense sum, to its parent's adder or (the root) the coordinator (Relay)
	KindRelayShard                 // worker: a shard's dense partial, to its group's adder
	maxKind
)

func (k Kind) String() string {
	names := [...]string{"?", "point", "partial", "meta", "assign", "heartbeat", "error", "group", "need-x", "probe", "solve", "solve-stop", "solving", "solved", "relay-node", "relay-shard"}
	if int(k) < len(names) {
		return names[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Header is a chunk's fixed prefix.
type Header struct {
	Version uint8
	Kind    Kind
	Job     uint64
	Round   uint64
	Shard   uint32
	Seq     uint32 // chunk number, from 0
	Total   uint32 // chunks in the logical message
	Len     uint32 // payload bytes in this chunk
	CRC     uint32 // CRC-32C of this chunk's payload
}

// Limits on what a decoder accepts, so a forged header cannot make a
// receiver allocate without bound.
const (
	MaxChunks      = 1 << 16
	MaxMessageSize = 8 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Decode errors, one per kind of bad chunk, so receivers can count them.
var (
	ErrShort    = errors.New("transport: chunk shorter than its header")
	ErrVersion  = errors.New("transport: unknown wire version")
	ErrKind     = errors.New("transport: unknown message kind")
	ErrLength   = errors.New("transport: payload length does not match")
	ErrChunk    = errors.New("transport: bad chunk number or count")
	ErrChecksum = errors.New("transport: checksum mismatch")
	ErrTorn     = errors.New("transport: a solve message's checksum does not match its chunks put together")
)

// VersionError is a chunk of another wire version: its sender runs
// another release. It is ErrVersion (errors.Is), and says both versions.
type VersionError struct{ Got uint8 }

func (e *VersionError) Error() string {
	return fmt.Sprintf("transport: wire version %d, this build speaks %d", e.Got, Version)
}

func (e *VersionError) Is(target error) bool { return target == ErrVersion }

// ForeignHeartbeat reads, as well as it can, who sent a heartbeat chunk
// of another wire version: the version byte and the kind lead the
// header in every version, and heartbeats have been JSON with "id" and
// "name" in all of them, so a worker of another release is named when
// it asks to join.
func ForeignHeartbeat(chunk []byte) (id, name string) {
	if len(chunk) < HeaderSize || Kind(chunk[1]) != KindHeartbeat {
		return "", ""
	}
	var hb struct{ ID, Name string }
	if json.Unmarshal(chunk[HeaderSize:], &hb) != nil {
		return "", ""
	}
	return hb.ID, hb.Name
}

// DecodeChunk checks a chunk and splits it into header and payload.
func DecodeChunk(b []byte) (Header, []byte, error) {
	var h Header
	if len(b) < HeaderSize {
		return h, nil, ErrShort
	}
	le := binary.LittleEndian
	h.Version = b[0]
	h.Kind = Kind(b[1])
	h.Job = le.Uint64(b[4:])
	h.Round = le.Uint64(b[12:])
	h.Shard = le.Uint32(b[20:])
	h.Seq = le.Uint32(b[24:])
	h.Total = le.Uint32(b[28:])
	h.Len = le.Uint32(b[32:])
	h.CRC = le.Uint32(b[36:])
	payload := b[HeaderSize:]
	switch {
	case h.Version != Version:
		return h, nil, &VersionError{Got: h.Version}
	case h.Kind == 0 || h.Kind >= maxKind:
		return h, nil, ErrKind
	case int(h.Len) != len(payload):
		return h, nil, ErrLength
	case h.Total == 0 || h.Total > MaxChunks || h.Seq >= h.Total:
		return h, nil, ErrChunk
	case crc32.Checksum(payload, castagnoli) != h.CRC:
		return h, nil, ErrChecksum
	}
	return h, payload, nil
}

// Chunks splits a logical message into chunks of at most maxChunk bytes
// (header included) and calls emit for each; emit must not keep the slice.
func Chunks(kind Kind, job, round uint64, shardID uint32, payload []byte, maxChunk int, emit func([]byte) error) error {
	var buf []byte
	return chunksIn(&buf, kind, job, round, shardID, [][]byte{payload}, maxChunk, emit)
}

// Chunker is Chunks with a buffer kept from message to message, so that
// a round's vectors, the bulk of the traffic, allocate nothing; it is
// safe for concurrent use.
type Chunker struct {
	mu  sync.Mutex
	buf []byte
}

// SendPieces sends a payload given as pieces in order (see
// PartialPieces and PointPieces): the chunks are filled from them, so the
// whole payload is never laid out in one buffer.
func (c *Chunker) SendPieces(kind Kind, job, round uint64, shardID uint32, pieces [][]byte, maxChunk int, emit func([]byte) error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return chunksIn(&c.buf, kind, job, round, shardID, pieces, maxChunk, emit)
}

func chunksIn(buf *[]byte, kind Kind, job, round uint64, shardID uint32, pieces [][]byte, maxChunk int, emit func([]byte) error) error {
	per := maxChunk - HeaderSize
	if per < 1 {
		return fmt.Errorf("transport: max payload %d too small", maxChunk)
	}
	size := 0
	for _, p := range pieces {
		size += len(p)
	}
	total := max((size+per-1)/per, 1)
	if total > MaxChunks {
		return fmt.Errorf("transport: %d-byte message needs %d chunks (max %d)", size, total, MaxChunks)
	}
	if n := HeaderSize + min(per, size); cap(*buf) < n {
		*buf = make([]byte, n)
	}
	le := binary.LittleEndian
	src := dec{rest: pieces} // reads the pieces in order
	for seq := 0; seq < total; seq++ {
		n := min((seq+1)*per, size) - min(seq*per, size)
		b := (*buf)[:HeaderSize+n]
		part := b[HeaderSize:]
		src.copyOut(part)
		clear(b[:HeaderSize])
		b[0] = Version
		b[1] = byte(kind)
		le.PutUint64(b[4:], job)
		le.PutUint64(b[12:], round)
		le.PutUint32(b[20:], shardID)
		le.PutUint32(b[24:], uint32(seq))
		le.PutUint32(b[28:], uint32(total))
		le.PutUint32(b[32:], uint32(n))
		le.PutUint32(b[36:], crc32.Checksum(part, castagnoli))
		if err := emit(b); err != nil {
			return err
		}
	}
	return nil
}

// key identifies a logical message, so chunks under one key must be of
// one message's bytes. A round's results are: they are bit-identical
// whoever computes them. A round's point changes when the coordinator
// sends it again with x or without the workers' tree, and a placement's
// messages differ, so those are numbered (KindPoint, KindSolving).
type key struct {
	kind  Kind
	job   uint64
	round uint64
	shard uint32
}

type pending struct {
	parts [][]byte
	have  int
	size  int
}

// Assembler puts chunked messages back together. It is not safe for
// concurrent use, but Recycle is.
type Assembler struct {
	MaxPending int // logical messages held at once; the oldest round goes first
	pend       map[key]*pending

	mu   sync.Mutex
	free [][]byte // whole messages handed back, to put the next ones in
}

// maxFree is how many recycled buffers an Assembler keeps: enough for
// the large messages of a round in flight at once (one per worker or so),
// few enough that what it holds stays small beside the point.
const maxFree = 2

// Recycle hands back a whole message returned by Add once the caller is
// done with it: the next multi-chunk message is put together in its
// memory instead of fresh memory.
func (a *Assembler) Recycle(b []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.free) < maxFree {
		a.free = append(a.free, b)
	}
}

// buffer is a recycled buffer of at least n bytes, or a new one.
func (a *Assembler) buffer(n int) []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, b := range a.free {
		if cap(b) >= n {
			a.free[i] = a.free[len(a.free)-1]
			a.free = a.free[:len(a.free)-1]
			return b[:0]
		}
	}
	return make([]byte, 0, n)
}

// Add takes one decoded chunk; it returns the whole payload when the last
// missing chunk of a message arrives. It keeps payload, and may return it
// as the whole message: the caller must not reuse it (NATS hands each
// message its own memory).
func (a *Assembler) Add(h Header, payload []byte) ([]byte, bool) {
	parts, ok := a.AddParts(h, payload)
	if !ok || len(parts) == 1 {
		return payload, ok
	}
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	out := a.buffer(size)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, true
}

// AddParts is Add returning the message as its chunks' payloads in order,
// not copied into one buffer: a worker decodes its points from them.
func (a *Assembler) AddParts(h Header, payload []byte) ([][]byte, bool) {
	if h.Total == 1 {
		return [][]byte{payload}, true
	}
	if a.pend == nil {
		a.pend = map[key]*pending{}
	}
	k := key{h.Kind, h.Job, h.Round, h.Shard}
	p := a.pend[k]
	if p == nil {
		if a.MaxPending > 0 && len(a.pend) >= a.MaxPending {
			a.evictOldest()
		}
		p = &pending{parts: make([][]byte, h.Total)}
		a.pend[k] = p
	}
	if int(h.Total) != len(p.parts) || p.parts[h.Seq] != nil {
		return nil, false // a duplicate, or a chunk of a different shape
	}
	if p.size+len(payload) > MaxMessageSize {
		delete(a.pend, k)
		return nil, false
	}
	p.parts[h.Seq] = payload
	p.have++
	p.size += len(payload)
	if p.have < len(p.parts) {
		return nil, false
	}
	delete(a.pend, k)
	return p.parts, true
}

// Forget drops incomplete messages of rounds before round.
func (a *Assembler) Forget(round uint64) {
	for k := range a.pend {
		if k.round < round {
			delete(a.pend, k)
		}
	}
}

// Drop drops incomplete messages of round alone: where rounds run side
// by side (placements), a later one's end says nothing of an earlier's.
func (a *Assembler) Drop(round uint64) {
	for k := range a.pend {
		if k.round == round {
			delete(a.pend, k)
		}
	}
}

func (a *Assembler) evictOldest() {
	var oldest *key
	for k := range a.pend {
		if oldest == nil || k.round < oldest.round {
			kk := k
			oldest = &kk
		}
	}
	if oldest != nil {
		delete(a.pend, *oldest)
	}
}
