// Package browser drives headless Chromium for the tests of the status
// page, through chromedp; a test without Chromium skips and says why.
package browser

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// Page is a browser tab and every URL it has requested.
type Page struct {
	Ctx context.Context
	mu  sync.Mutex
	req []string
}

// Open starts Chromium for t (stopped at its end) with a tab; it skips t
// where no Chromium is installed, unless OSGM_BROWSER_TESTS=require.
func Open(t testing.TB, timeout time.Duration) *Page {
	t.Helper()
	exe := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			exe = p
			break
		}
	}
	if exe == "" {
		if os.Getenv("OSGM_BROWSER_TESTS") == "require" {
			t.Fatal("no chromium on PATH, and OSGM_BROWSER_TESTS=require")
		}
		t.Skip("no chromium on PATH (apt-get install chromium): the browser test needs it")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox,
		chromedp.WindowSize(1280, 1000), chromedp.UserDataDir(t.TempDir()))
	p := &Page{}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithListener(func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			p.mu.Lock()
			p.req = append(p.req, e.Request.URL)
			p.mu.Unlock()
		}
	}))
	ctx, cancelTime := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelTime(); cancelTab(); cancelAlloc() })
	p.Ctx = ctx
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("starting %s: %v", exe, err)
	}
	return p
}

// Eval evaluates a JavaScript expression in the tab into T.
func Eval[T any](p *Page, js string) (T, error) {
	return chromedp.Run(p.Ctx, chromedp.Evaluate[T](js))
}

// Go opens url in the tab.
func (p *Page) Go(url string) error { return chromedp.Do(p.Ctx, chromedp.Navigate(url)) }

// Requests lists the URLs the tab has requested so far.
func (p *Page) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.req...)
}

// Screenshot saves the whole page as a PNG in OSGM_ARTIFACTS (a
// directory), else in the test's temporary directory, and logs where.
func (p *Page) Screenshot(t *testing.T, name string) string {
	t.Helper()
	png, err := chromedp.Run(p.Ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("OSGM_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	return path
}
