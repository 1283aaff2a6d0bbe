package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"go.uber.org/zap"

	"github.com/osgm-svm/osgm/internal/natstest"
)

func startServer(t *testing.T, opts *server.Options) string { return natstest.Run(t, opts).ClientURL() }

// connects reports whether a client with auth gets a working connection.
func connects(t *testing.T, url string, auth Auth) bool {
	t.Helper()
	opts, err := auth.options()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, append(opts, nats.Timeout(2*time.Second))...)
	if err != nil {
		return false
	}
	defer nc.Close()
	return nc.Flush() == nil
}

func TestAuthMethods(t *testing.T) {
	t.Run("user-password", func(t *testing.T) {
		url := startServer(t, &server.Options{Username: "u", Password: "right"})
		if !connects(t, url, Auth{User: "u", Password: "right"}) || connects(t, url, Auth{User: "u", Password: "wrong"}) {
			t.Fatal("password check wrong")
		}
	})
	t.Run("token", func(t *testing.T) {
		url := startServer(t, &server.Options{Authorization: "s3cret"})
		if !connects(t, url, Auth{Token: "s3cret"}) || connects(t, url, Auth{Token: "guess"}) || connects(t, url, Auth{}) {
			t.Fatal("token check wrong")
		}
	})
	t.Run("nkey", func(t *testing.T) {
		kp, _ := nkeys.CreateUser()
		pub, _ := kp.PublicKey()
		seed, _ := kp.Seed()
		seedFile := filepath.Join(t.TempDir(), "user.nk")
		os.WriteFile(seedFile, seed, 0o600)
		other, _ := nkeys.CreateUser()
		otherSeed, _ := other.Seed()
		otherFile := filepath.Join(t.TempDir(), "other.nk")
		os.WriteFile(otherFile, otherSeed, 0o600)
		url := startServer(t, &server.Options{Nkeys: []*server.NkeyUser{{Nkey: pub}}})
		if !connects(t, url, Auth{NKeyFile: seedFile}) || connects(t, url, Auth{NKeyFile: otherFile}) {
			t.Fatal("nkey check wrong")
		}
	})
	t.Run("mutual-tls", func(t *testing.T) {
		dir := t.TempDir()
		ca, caKey := makeCert(t, dir, "ca", nil, nil)
		makeCert(t, dir, "server", ca, caKey)
		makeCert(t, dir, "client", ca, caKey)
		serverCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(ca)
		url := startServer(t, &server.Options{TLS: true, TLSVerify: true, TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{serverCert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}})
		ok := Auth{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "client.pem"), KeyFile: filepath.Join(dir, "client-key.pem")}
		if !connects(t, url, ok) {
			t.Fatal("client with a certificate refused")
		}
		if connects(t, url, Auth{CAFile: filepath.Join(dir, "ca.pem")}) {
			t.Fatal("client without a certificate accepted")
		}
		if _, err := (Auth{CertFile: "only-cert.pem"}).options(); err == nil {
			t.Fatal("a certificate without a key accepted")
		}
	})
	t.Run("untrusted-server", func(t *testing.T) {
		dir := t.TempDir()
		ca, caKey := makeCert(t, dir, "ca", nil, nil)
		makeCert(t, dir, "server", ca, caKey)
		serverCert, err := tls.LoadX509KeyPair(filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		url := startServer(t, &server.Options{TLS: true, TLSConfig: &tls.Config{Certificates: []tls.Certificate{serverCert}, MinVersion: tls.VersionTLS12}})
		if err := CheckConnect(url, "check", Auth{CAFile: filepath.Join(dir, "ca.pem")}, zap.NewNop()); err != nil {
			t.Fatalf("with the CA: %v", err)
		}
		// Without it the check says what is missing at once, instead of
		// retrying for its 30 s and printing a bare x509 error.
		start := time.Now()
		err = CheckConnect(url, "check", Auth{}, zap.NewNop())
		if err == nil || !strings.Contains(err.Error(), "-tlsca") || time.Since(start) > 10*time.Second {
			t.Fatalf("without the CA, after %v: %v", time.Since(start), err)
		}
	})
}

// makeCert writes NAME.pem and NAME-key.pem, signed by parent (self-signed
// when parent is nil), valid for 127.0.0.1.
func makeCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	signer, signerKey := tmpl, key
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	} else {
		signer, signerKey = parent, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signerKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	os.WriteFile(filepath.Join(dir, name+".pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(filepath.Join(dir, name+"-key.pem"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	return cert, key
}
