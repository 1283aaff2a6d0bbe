// Package s3 reads training files from S3-compatible object storage
// (s3://bucket/key) by byte range, so that each worker reads only its
// shards' ranges: no shared path, no copy into JetStream.
//
// Credentials and endpoint come from the standard places: the
// environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
// AWS_ENDPOINT_URL), the shared credentials file, and an instance's IAM
// role. A custom endpoint (an S3-compatible server) is addressed
// path-style. Every read is pinned to the ETag the object had when it
// was opened: an object replaced while a job reads it is refused, never
// mixed into one model.
package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// IsURL reports whether name is an s3:// URL.
func IsURL(name string) bool { return strings.HasPrefix(name, "s3://") }

// ErrChanged reports an object that is no longer the version a job
// started with.
var ErrChanged = errors.New("the object changed while the job was reading it")

var (
	errNoObject = errors.New("no such object")
	errRefused  = errors.New("the credentials were refused")
)

// permanent says whether err is one no retry can cure.
func permanent(err error) bool {
	return errors.Is(err, ErrChanged) || errors.Is(err, errNoObject) || errors.Is(err, errRefused)
}

// Object is one version of an object: its size and ETag when opened.
type Object struct {
	URL         string
	Size        int64
	ETag        string
	bucket, key string
	client      *minio.Client
}

// Open stats the object at an s3://bucket/key URL; its errors name the
// object and say what is wrong (no such bucket, no such key, refused
// credentials).
func Open(ctx context.Context, name string) (*Object, error) {
	client, bucket, key, err := clientFor(name)
	if err != nil {
		return nil, err
	}
	info, err := client.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err != nil {
		err = explain(err)
		// A HEAD's 404 has no body to say which is missing.
		if errors.Is(err, errNoObject) {
			if ok, berr := client.BucketExists(ctx, bucket); berr == nil && !ok {
				err = fmt.Errorf("no such bucket %q", bucket)
			}
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &Object{URL: name, Size: info.Size, ETag: info.ETag, bucket: bucket, key: key, client: client}, nil
}

func split(name string) (bucket, key string, err error) {
	rest, ok := strings.CutPrefix(name, "s3://")
	bucket, key, _ = strings.Cut(rest, "/")
	if !ok || bucket == "" || key == "" {
		return "", "", fmt.Errorf("%s: not an s3://bucket/key URL", name)
	}
	return bucket, key, nil
}

// clientFor is the bucket and key of an s3://bucket/key URL and a client
// to reach them; its errors name the URL.
func clientFor(name string) (*minio.Client, string, string, error) {
	bucket, key, err := split(name)
	if err != nil {
		return nil, "", "", err
	}
	client, err := newClient()
	if err != nil {
		return nil, "", "", fmt.Errorf("%s: %w", name, err)
	}
	return client, bucket, key, nil
}

// newClient is a client for AWS_ENDPOINT_URL (default AWS's), with the
// standard credential chain.
func newClient() (*minio.Client, error) {
	endpoint, secure := "s3.amazonaws.com", true
	if e := firstEnv("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"); e != "" {
		u, err := url.Parse(e)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("AWS_ENDPOINT_URL %q: want a URL such as http://host:port", e)
		}
		endpoint, secure = u.Host, u.Scheme != "http"
	}
	creds := credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{}, &credentials.FileAWSCredentials{}, &credentials.IAM{},
	})
	// Auto: virtual-host style at AWS, path style at any other endpoint
	// (an S3-compatible server at an IP address has no bucket names in
	// its DNS).
	return minio.New(endpoint, &minio.Options{Creds: creds, Secure: secure, Region: firstEnv("AWS_REGION", "AWS_DEFAULT_REGION"), BucketLookup: minio.BucketLookupAuto})
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// explain turns the server's error codes into what a user can act on.
func explain(err error) error {
	switch r := minio.ToErrorResponse(err); r.Code {
	case minio.NoSuchBucket:
		return fmt.Errorf("no such bucket: %w", err)
	case minio.NoSuchKey, "NotFound":
		return fmt.Errorf("%w: %w", errNoObject, err)
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "Forbidden":
		return fmt.Errorf("%w (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or the shared credentials file): %w", errRefused, err)
	case "PreconditionFailed":
		return ErrChanged
	}
	return err
}

// Reader reads the object from a position (Seek) to its end with one
// ranged GET, pinned to the object's ETag; a reader closed early, as a
// shard's load does past its range, reads no further.
func (o *Object) Reader(ctx context.Context) io.ReadSeekCloser {
	return &reader{o: o, ctx: ctx}
}

type reader struct {
	o    *Object
	ctx  context.Context
	pos  int64
	body io.ReadCloser
}

// readRetries and the backoff between them bound how long a read waits
// for a server that stopped mid-object to come back: half a minute of
// these, a restart's time, and with the client's own retries of each
// GET about a minute in all; then the load fails and says why.
const readRetries = 9

func backoff(attempt int) time.Duration {
	return min(200*time.Millisecond<<attempt, 5*time.Second)
}

// Read reads on from the position, starting the GET again where a
// broken one stopped (the client retries requests, not a body that
// breaks mid-way), as long as the object is the version opened.
func (r *reader) Read(b []byte) (int, error) {
	for attempt := 0; ; attempt++ {
		n, err := r.read(b)
		switch {
		case err == nil || err == io.EOF || permanent(err) || attempt == readRetries:
			return n, err
		case n > 0:
			r.Close() // the next read starts a new GET at the position
			return n, nil
		}
		r.Close()
		select {
		case <-r.ctx.Done():
			return 0, err
		case <-time.After(backoff(attempt)):
		}
	}
}

func (r *reader) read(b []byte) (int, error) {
	if r.pos >= r.o.Size {
		return 0, io.EOF
	}
	if r.body == nil {
		var opts minio.GetObjectOptions
		if r.pos > 0 { // SetRange(0, 0) would be the first byte alone
			if err := opts.SetRange(r.pos, 0); err != nil {
				return 0, err
			}
		}
		if err := opts.SetMatchETag(r.o.ETag); err != nil {
			return 0, err
		}
		body, err := r.o.client.GetObject(r.ctx, r.o.bucket, r.o.key, opts)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", r.o.URL, explain(err))
		}
		r.body = body
	}
	n, err := r.body.Read(b)
	r.pos += int64(n)
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%s at byte %d: %w", r.o.URL, r.pos, explain(err))
	}
	return n, err
}

func (r *reader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		offset += r.pos
	case io.SeekEnd:
		offset += r.o.Size
	}
	if offset < 0 {
		return 0, fmt.Errorf("%s: seek to %d", r.o.URL, offset)
	}
	if offset != r.pos {
		r.Close()
		r.pos = offset
	}
	return offset, nil
}

func (r *reader) Close() error {
	if r.body == nil {
		return nil
	}
	err := r.body.Close()
	r.body = nil
	return err
}

// CheckBucket says whether an object could be put at an s3://bucket/key
// URL: its bucket exists and the credentials may list it. A model whose
// bucket is wrong should cost seconds, not the training before it.
func CheckBucket(ctx context.Context, name string) error {
	client, bucket, _, err := clientFor(name)
	if err != nil {
		return err
	}
	ok, err := client.BucketExists(ctx, bucket)
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", name, explain(err))
	case !ok:
		return fmt.Errorf("%s: no such bucket %q", name, bucket)
	}
	return nil
}

// Put uploads what write writes as the object at an s3://bucket/key URL,
// streamed in parts: the object appears whole once every byte is
// there, or not at all, as a file written beside and renamed does.
func Put(ctx context.Context, name string, write func(io.Writer) error) error {
	client, bucket, key, err := clientFor(name)
	if err != nil {
		return err
	}
	r, w := io.Pipe()
	go func() { w.CloseWithError(write(w)) }()
	_, err = client.PutObject(ctx, bucket, key, r, -1, minio.PutObjectOptions{ContentType: "text/plain"})
	r.CloseWithError(err) // a failed upload stops the writer
	if err != nil {
		return fmt.Errorf("%s: %w", name, explain(err))
	}
	return nil
}
