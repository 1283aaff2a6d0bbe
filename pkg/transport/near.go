package transport

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/logging"
)

// nearWait bounds how long a client looks for the server on its own host
// while some servers do not answer yet: at a stack's start the servers
// come up beside the clients (the swarm's took 15 s to answer here, the
// workers' images being smaller), and one cut off never answers.
const nearWait = 30 * time.Second

// ConnectNear is Connect to url, a cluster's servers comma-separated,
// with the server on host near tried first and kept first on reconnects
// (NearFirst), and gone back to once it answers again after a failover
// (home). Without near, or with one server, it is Connect.
//
// between is where the client's protocol lets a move home happen: called
// at a round's start, it makes a move that is due and reports whether it
// did (see home). It is never nil.
func ConnectNear(ctx context.Context, url, near, name string, auth Auth, log *zap.Logger, extra ...nats.Option) (nc *nats.Conn, between func() bool, err error) {
	nc, h, err := connectNear(ctx, url, near, name, auth, log, homeEvery, homeEvery, extra...)
	if h == nil {
		return nc, func() bool { return false }, err
	}
	return nc, func() bool { return h.between(nc) }, nil
}

// connectNear is ConnectNear with home's check period and grace; h is
// nil when there is no home to go back to.
func connectNear(ctx context.Context, url, near, name string, auth Auth, log *zap.Logger, period, grace time.Duration, extra ...nats.Option) (nc *nats.Conn, h *home, err error) {
	ordered, ok, err := NearFirst(ctx, url, near, auth, nearWait)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case ok:
		first, _, _ := strings.Cut(ordered, ",")
		log.Info("the NATS server on this host comes first", zap.String("host", near), zap.String("url", first))
		h = &home{url: first, host: near, auth: auth, log: log}
		// After the defaults, whose random order would undo this one.
		extra = append(extra, nats.DontRandomize(), nats.ReconnectToServer(h.pick))
	case near != "" && strings.Contains(url, ","):
		log.Info("no NATS server on this host answered; any will do", zap.String("host", near))
	}
	nc, err = Connect(ordered, name, auth, log, extra...)
	if err != nil || h == nil {
		return nc, nil, err
	}
	go h.keep(nc, period, grace)
	return nc, h, nil
}

// homeEvery is how often a client that failed over asks whether the
// server on its own host answers again, and how long a move that is due
// waits for the client's next round to start before it is made anyway
// (a client with no rounds under way loses nothing to it).
const homeEvery = 2 * time.Second

// home brings a client that failed over to another host's server back
// to its own host's once that one answers again: otherwise every byte it
// sends and receives would cross a route for the rest of the job.
//
// The move is a reconnection, made between rounds, where it costs
// nothing: the client's protocol calls between at a round's start. The
// coordinator's last round has all its results in, and it sends the next
// point once the new connection is up; a worker holds the round's point,
// and what it sends meanwhile waits in the connection's buffer. A move
// made at any other time can lose a point in flight, which costs a
// resend.
type home struct {
	url, host string
	auth      Auth
	log       *zap.Logger
	going     atomic.Bool // the next reconnection goes home
	due       atomic.Bool // home answers: move at the next round's start
}

// keep checks every period, until the connection closes, whether the
// client is away and its home server answers; the move is then due, and
// made by between, or by keep itself once it has been due for grace.
func (h *home) keep(nc *nats.Conn, period, grace time.Duration) {
	opts, err := h.auth.options()
	if err != nil {
		return
	}
	var since time.Time
	for ; !nc.IsClosed(); time.Sleep(period) {
		if !nc.IsConnected() || strings.HasSuffix(nc.ConnectedServerName(), "@"+h.host) {
			h.due.Store(false)
			continue
		}
		if name := serverNames([]string{h.url}, opts)[0]; !strings.HasSuffix(name, "@"+h.host) {
			h.due.Store(false)
			continue
		}
		if !h.due.Load() {
			since = time.Now()
			h.due.Store(true)
		}
		if time.Since(since) >= grace && h.due.Swap(false) {
			h.move(nc, "no round started meanwhile")
		}
	}
}

// between makes a move that is due, and reports whether it did.
func (h *home) between(nc *nats.Conn) bool {
	if !h.due.Swap(false) {
		return false
	}
	h.move(nc, "between rounds")
	return true
}

func (h *home) move(nc *nats.Conn, when string) {
	h.log.Info("the NATS server on this host answers again: moving back to it", logging.Event("reconnect"),
		zap.String("from", nc.ConnectedServerName()), zap.String("url", h.url), zap.String("when", when))
	h.going.Store(true)
	nc.ForceReconnect()
}

// pick is the connection's choice of server on a reconnection: home,
// when keep asked for it, else nats.go's own (the pool in order).
func (h *home) pick(servers []nats.Server, _ nats.ServerInfo) (*nats.Server, time.Duration) {
	if !h.going.Swap(false) {
		return nil, 0
	}
	at := h.url
	if _, rest, ok := strings.Cut(at, "://"); ok {
		at = rest
	}
	if i := strings.LastIndex(at, "@"); i >= 0 {
		at = at[i+1:] // credentials in the URL
	}
	for i := range servers {
		if servers[i].URL != nil && servers[i].URL.Host == at {
			return &servers[i], 0
		}
	}
	return nil, 0
}

// NearFirst orders url, NATS servers comma-separated, so that the first
// one running on host comes first: the server whose name ends in "@host",
// as deploy/stack.cluster.yaml names them. A client of its own host's
// server sends and receives over no network link; the cluster's routes
// carry each point across hosts once, and the server fans it out
// locally.
//
// The servers are asked their names in parallel, again each second
// while some do not answer, until one on host does, all have answered,
// or wait has passed; ok says whether one was found (url comes back as
// given when not). Only ctx ending is an error.
func NearFirst(ctx context.Context, url, host string, auth Auth, wait time.Duration) (ordered string, ok bool, err error) {
	urls := strings.Split(url, ",")
	if host == "" || len(urls) < 2 {
		return url, false, nil
	}
	opts, err := auth.options()
	if err != nil {
		return "", false, err
	}
	deadline := time.Now().Add(wait)
	for {
		names := serverNames(urls, opts)
		for i, n := range names {
			if strings.HasSuffix(n, "@"+host) {
				rest := slices.Delete(slices.Clone(urls), i, i+1)
				return strings.Join(append([]string{urls[i]}, rest...), ","), true, nil
			}
		}
		if !slices.Contains(names, "") || time.Now().After(deadline) {
			return url, false, nil
		}
		select {
		case <-ctx.Done():
			return "", false, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// serverNames asks each server its name: "" for one that does not answer
// within a second or refuses the credentials.
func serverNames(urls []string, opts []nats.Option) []string {
	names := make([]string, len(urls))
	var wg sync.WaitGroup
	for i, u := range urls {
		wg.Go(func() {
			nc, err := nats.Connect(u, append(slices.Clone(opts), nats.Timeout(time.Second), nats.NoReconnect())...)
			if err != nil {
				return
			}
			names[i] = nc.ConnectedServerName()
			nc.Close()
		})
	}
	wg.Wait()
	return names
}
