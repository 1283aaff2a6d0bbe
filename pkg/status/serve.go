package status

import (
	"embed"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"
)

//go:embed page/index.html
var page embed.FS

// policy lets the page load nothing but itself and its own API: no
// request leaves for another host, whatever the page's markup holds.
const policy = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page at / and the board's state at /api/status
// (?problem=k picks the curve's problem). It is read-only: GET and HEAD.
func (b *Board) Handler() http.Handler {
	html, err := page.ReadFile("page/index.html")
	if err != nil {
		panic(err) // embedded at build time
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", policy)
		w.Write(html)
	})
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, r *http.Request) {
		problem := -1
		if q := r.URL.Query().Get("problem"); q != "" {
			k, err := strconv.Atoi(q)
			if err != nil {
				http.Error(w, "problem: not a number", http.StatusBadRequest)
				return
			}
			problem = k
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(b.Snapshot(problem))
	})
	return mux
}

// Addr is where -http listens: a port alone (":8080") or an empty host
// means the loopback interface, so only this host's users see the page;
// another interface must be named.
func Addr(flag string) (string, error) {
	host, port, err := net.SplitHostPort(flag)
	if err != nil {
		return "", fmt.Errorf("-http %q: %w (want HOST:PORT or :PORT)", flag, err)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// Loopback reports whether addr (HOST:PORT) listens on the loopback
// interface only.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serve listens on addr (see Addr) and serves b until stop is called; it
// returns the address it listens on (the port chosen for ":0").
func (b *Board) Serve(addr string) (bound string, stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("-http: %w", err)
	}
	srv := &http.Server{Handler: b.Handler(), ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(l) // ends with Close
	}()
	return l.Addr().String(), func() { srv.Close(); <-done }, nil
}
