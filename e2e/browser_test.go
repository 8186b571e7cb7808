package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tenurehq/tenure/internal/testenv/poll"
)

// browser is one headless Chromium with one tab.
type browser struct {
	t   *testing.T
	ctx context.Context
}

// chromium finds the browser binary: TENURE_CHROMIUM, else the
// distribution's package.
func chromium() (string, error) {
	if p := os.Getenv("TENURE_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no Chromium found (looked for /usr/bin/chromium, chromium-browser, google-chrome): install the distribution's chromium package (.ci/run does) or set TENURE_CHROMIUM")
}

func newBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	exe, err := chromium()
	if err != nil {
		t.Fatal(err)
	}
	// The flags keep Chromium off the network: a closed machine refuses
	// its background connections, many at a time.
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(width, height))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	// The browser lives as long as the context of its first action: that
	// one runs on ctx itself, bounded by a watchdog rather than a timeout.
	watchdog := time.AfterFunc(60*time.Second, cancel)
	err = chromedp.Do(ctx, chromedp.EmulateViewport(int64(width), int64(height)))
	watchdog.Stop()
	if err != nil {
		t.Fatalf("starting Chromium %s: %v", exe, err)
	}
	return &browser{t: t, ctx: ctx}
}

// run runs actions, bounded.
func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression and decodes its JSON value into
// out.
func (b *browser) eval(js string, out any) error {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[json.RawMessage](js))
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

// script is an action that runs a JavaScript statement, whatever it gives.
func script(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Evaluate[any](js)(ctx, t)
		return err
	})
}

// sel is the CSS selector of the elements with data-testid id.
func sel(id string) chromedp.CSS { return chromedp.CSS(testid(id)) }

// until evaluates js (an expression giving {ok: bool, why: string}) until
// ok, for at most within; the page polls its API every 2 s, so a view
// catches up with the cluster within a poll or two of it changing.
func (b *browser) until(what string, within time.Duration, js string) {
	b.t.Helper()
	var last struct {
		OK  bool   `json:"ok"`
		Why string `json:"why"`
	}
	err := poll.Until(context.Background(), within, 200*time.Millisecond, func() (bool, string, error) {
		if err := b.eval(js, &last); err != nil {
			return false, err.Error(), nil
		}
		return last.OK, last.Why, nil
	})
	if err != nil {
		b.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// confirm answers the page's confirmation dialog yes, as a user clicking
// its confirm button would.
func (b *browser) confirm(what string) {
	b.t.Helper()
	b.run("confirm "+what, chromedp.WaitVisible(sel("confirm-ok")), chromedp.Click(sel("confirm-ok")))
}

// screenshot writes the page to TENURE_E2E_SCREENSHOTS/name.png when that
// is set.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	dir := os.Getenv("TENURE_E2E_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}
