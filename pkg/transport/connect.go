package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/pkg/logging"
)

// Auth holds the ways a process can prove who it is to NATS. Secrets come
// from files or the environment, never from the command line.
type Auth struct {
	User, Password string // or from NATS_USER / NATS_PASSWORD
	Token          string // or NATS_TOKEN
	NKeyFile       string // NKey seed file
	CredsFile      string // JWT credentials file
	CAFile         string // TLS: trusted roots
	CertFile       string // TLS: client certificate (mutual TLS)
	KeyFile        string
}

// Flags registers the commands' NATS credential flags on fs, each
// defaulting to its environment variable, so that the coordinator and the
// workers are configured alike (a container's environment, or flags).
func (a *Auth) Flags(fs *flag.FlagSet) {
	fs.StringVar(&a.User, "user", os.Getenv("NATS_USER"), "NATS user, password from NATS_PASSWORD (or NATS_USER)")
	fs.StringVar(&a.NKeyFile, "nkey", os.Getenv("NATS_NKEY_FILE"), "NATS NKey seed file (or NATS_NKEY_FILE)")
	fs.StringVar(&a.CredsFile, "creds", os.Getenv("NATS_CREDS_FILE"), "NATS credentials file (or NATS_CREDS_FILE)")
	fs.StringVar(&a.CAFile, "tlsca", os.Getenv("NATS_CA_FILE"), "TLS CA file for the NATS server (or NATS_CA_FILE)")
	fs.StringVar(&a.CertFile, "tlscert", os.Getenv("NATS_CERT_FILE"), "TLS client certificate, mutual TLS (or NATS_CERT_FILE)")
	fs.StringVar(&a.KeyFile, "tlskey", os.Getenv("NATS_KEY_FILE"), "TLS client key, mutual TLS (or NATS_KEY_FILE)")
}

// FromEnv fills unset secrets from the environment: NATS_USER, and the
// password and token either as NATS_PASSWORD and NATS_TOKEN or read from
// the files NATS_PASSWORD_FILE and NATS_TOKEN_FILE name. The files are how
// Docker's and Kubernetes' secrets arrive (/run/secrets/...), where an
// environment variable would show in `docker inspect`.
func (a Auth) FromEnv() (Auth, error) {
	if a.User == "" {
		a.User = os.Getenv("NATS_USER")
	}
	var err error
	if a.Password == "" {
		if a.Password, err = secret("NATS_PASSWORD"); err != nil {
			return a, err
		}
	}
	if a.Token == "" {
		if a.Token, err = secret("NATS_TOKEN"); err != nil {
			return a, err
		}
	}
	return a, nil
}

// secret is the value of the environment variable name, or the contents
// of the file name_FILE gives, without its trailing newline (what `echo
// pw | docker secret create` stores). Both set is refused: which one
// would win is a guess the user should not have to make.
func secret(name string) (string, error) {
	v, file := os.Getenv(name), os.Getenv(name+"_FILE")
	switch {
	case file == "":
		return v, nil
	case v != "":
		return "", fmt.Errorf("both %s and %s_FILE are set: give one", name, name)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s_FILE: %w", name, err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s_FILE: %s is empty", name, file)
	}
	return s, nil
}

func (a Auth) options() ([]nats.Option, error) {
	var opts []nats.Option
	if a.User != "" {
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	}
	if a.Token != "" {
		opts = append(opts, nats.Token(a.Token))
	}
	if a.NKeyFile != "" {
		o, err := nats.NkeyOptionFromSeed(a.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("nkey seed %s: %w", a.NKeyFile, err)
		}
		opts = append(opts, o)
	}
	if a.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	}
	if a.CAFile != "" {
		opts = append(opts, nats.RootCAs(a.CAFile))
	}
	if a.CertFile != "" || a.KeyFile != "" {
		if a.CertFile == "" || a.KeyFile == "" {
			return nil, errors.New("mutual TLS needs both a certificate and a key file")
		}
		opts = append(opts, nats.ClientCert(a.CertFile, a.KeyFile))
	}
	return opts, nil
}

// pingInterval is how often a client pings its server.
const pingInterval = 3 * time.Second

// Connect opens a connection that keeps reconnecting through server
// restarts and says so in the log; extra options override its own.
func Connect(url, name string, auth Auth, log *zap.Logger, extra ...nats.Option) (*nats.Conn, error) {
	opts, err := auth.options()
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		nats.Name(name),
		nats.MaxReconnects(-1),
		// Back off from 100 ms to 5 s, with jitter, so a fleet of workers
		// does not hammer a server that is restarting.
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			d := 100 * time.Millisecond << min(attempts, 6)
			return min(d, 5*time.Second) + time.Duration(rand.Int64N(int64(100*time.Millisecond)))
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Warn("cannot reach NATS; retrying with backoff", zap.String("url", url), zap.Error(err))
		}),
		nats.ReconnectBufSize(64<<20),
		// A connection that hangs rather than closes (a partition, a host
		// that vanished, a healed link over which the old TCP connection
		// is dead) is found by unanswered pings: within about 12 s, not
		// the client's default of minutes, so a partitioned worker is
		// back soon after the network is.
		nats.PingInterval(pingInterval),
		nats.MaxPingsOutstanding(3),
		nats.RetryOnFailedConnect(true),
		nats.ConnectHandler(func(c *nats.Conn) {
			log.Info("connected to NATS", zap.String("url", c.ConnectedUrl()), zap.String("server", c.ConnectedServerName()))
		}),
		nats.DisconnectErrHandler(func(c *nats.Conn, err error) {
			if !c.IsClosed() {
				log.Warn("disconnected from NATS; retrying", logging.Event("reconnect"), zap.Error(err))
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("reconnected to NATS", logging.Event("reconnect"), zap.String("url", c.ConnectedUrl()), zap.String("server", c.ConnectedServerName()))
		}),
		nats.ErrorHandler(func(_ *nats.Conn, s *nats.Subscription, err error) {
			subj := ""
			if s != nil {
				subj = s.Subject
			}
			log.Error("NATS error", zap.String("subject", subj), zap.Error(err))
		}),
	)
	opts = append(opts, extra...) // after the defaults, which they may override
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", url, err)
	}
	return nc, nil
}

// OnReconnect has nc call fn after its reconnect handler each time it is
// back; restore gives it its handler alone again.
func OnReconnect(nc *nats.Conn, fn func()) (restore func()) {
	return chain(nc.ReconnectHandler(), nc.SetReconnectHandler, fn)
}

// OnClosed has nc call fn, after its closed handler, when it closes;
// restore gives it its handler alone again.
func OnClosed(nc *nats.Conn, fn func()) (restore func()) {
	return chain(nc.ClosedHandler(), nc.SetClosedHandler, fn)
}

// chain sets a handler that calls prev, then fn; restore sets prev back.
func chain(prev nats.ConnHandler, set func(nats.ConnHandler), fn func()) (restore func()) {
	set(func(nc *nats.Conn) {
		if prev != nil {
			prev(nc)
		}
		fn()
	})
	return func() { set(prev) }
}

// WaitConnected blocks until the connection is up, the timeout passes,
// ctx ends (a SIGTERM from a supervisor must not wait out the timeout)
// or the client gives up: nats.go closes a connection whose credentials
// the server refused twice, and a closed one never comes up. With
// RetryOnFailedConnect, Connect returns before any of that.
func WaitConnected(ctx context.Context, nc *nats.Conn, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !nc.IsConnected() {
		if err := ClosedError(nc); err != nil {
			return err
		}
		if err := untrusted(nc.LastError()); err != nil {
			return err // no retry makes a certificate trusted
		}
		if time.Now().After(deadline) {
			if err := nc.LastError(); err != nil {
				return fmt.Errorf("not connected to NATS after %v: %w", timeout, err)
			}
			return fmt.Errorf("not connected to NATS after %v", timeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("while connecting to NATS: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// untrusted explains err when it is the server's certificate that this
// process does not trust (nil otherwise): the usual cause is a missing
// CA, which the bare x509 error does not name.
func untrusted(err error) error {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
	)
	switch {
	case errors.As(err, &hostname):
		return fmt.Errorf("the NATS server's certificate does not name the host in the URL (%w): connect by a name or address it holds", err)
	case errors.As(err, &verify), errors.As(err, &unknown):
		return fmt.Errorf("the NATS server's certificate is not signed by a CA this process trusts (%w): give the CA with -tlsca or NATS_CA_FILE", err)
	}
	return nil
}

// ClosedError says why nc is closed for good, nil while it is not.
func ClosedError(nc *nats.Conn) error {
	if !nc.IsClosed() {
		return nil
	}
	if err := nc.LastError(); err != nil {
		return fmt.Errorf("NATS connection closed: %w", err)
	}
	return errors.New("NATS connection closed")
}

// Embedded starts a NATS server inside this process on a random loopback
// port, with JetStream storing in dir; without JetStream when dir is
// empty (JetStream adds 1-3 ms to the server's start on a 2-core VM).
func Embedded(dir string) (*server.Server, error) { return embedded(dir, -1) }

// embedded is Embedded on a given port (-1: a random one); tests restart
// a server on the port of the one they stopped.
func embedded(dir string, port int) (*server.Server, error) {
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: port, NoSigs: true, NoLog: true,
		JetStream: dir != "", StoreDir: dir,
	})
	if err != nil {
		return nil, err
	}
	// Start returns once the server listens, so the first check below
	// passes at once. Started in a goroutine instead, the server had to
	// be polled: ReadyForConnections sleeps 25 ms between checks, most of
	// a small job's start-up, and short checks in a loop spun a core the
	// server and the load needed (a quarter of the CPU of a run on
	// ijcnn1 that stops after its first gradient).
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("embedded NATS server did not start")
	}
	return s, nil
}

// CheckConnect connects and closes again: the server at url answers and
// accepts auth. A deployment checks this once before it starts processes
// with a restart policy, which would otherwise restart them forever on
// credentials the server refuses.
func CheckConnect(url, name string, auth Auth, log *zap.Logger) error {
	nc, err := Connect(url, name, auth, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	return WaitConnected(context.Background(), nc, 30*time.Second)
}
