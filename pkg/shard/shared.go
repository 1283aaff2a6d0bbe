package shard

import (
	"sync"
	"sync/atomic"

	"github.com/osgm-svm/osgm/pkg/input"
)

// Shared is what the loads of one process share, passed to them in
// Options: text decompressed once for them (Hold), the shards they
// built, and the bytes the loads under way still need as plain shards
// (see fit). The zero value is ready; a nil *Shared shares nothing.
type Shared struct {
	input.Held
	mu sync.Mutex
	// loaded is every shard the loads built, by file and range: the
	// in-process workers', on which the coordinator also trains whole
	// problems (Loaded).
	loaded  map[input.Version]map[int]*Shard
	pending atomic.Int64 // see fit
	plain   atomic.Int64
}

// keep records shards loaded from path at version file.
func (s *Shared) keep(path string, file input.FileID, ranges []input.Range, shards []*Shard) {
	if s == nil {
		return
	}
	key, err := input.VersionOf(path, file)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loaded == nil {
		s.loaded = map[input.Version]map[int]*Shard{}
	}
	if s.loaded[key] == nil {
		s.loaded[key] = map[int]*Shard{}
	}
	for i, r := range ranges {
		s.loaded[key][r.ID] = shards[i]
	}
}

// Loaded is views (Shard.View) of the n shards of path at version file,
// in order, when the process's loads built every one (nil otherwise):
// the rows are the in-process workers' memory, read only.
func (s *Shared) Loaded(path string, file input.FileID, n int) []*Shard {
	key, err := input.VersionOf(path, file)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.loaded[key]
	out := make([]*Shard, n)
	for id := range out {
		if got[id] == nil {
			return nil
		}
		out[id] = got[id].View()
	}
	return out
}

// held is the text s holds for the loads (nil for a nil s).
func (s *Shared) held() *input.Held {
	if s == nil {
		return nil
	}
	return &s.Held
}
