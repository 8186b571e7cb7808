package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tenurehq/tenure/entity/task"
	"github.com/tenurehq/tenure/internal/testenv"
	"github.com/tenurehq/tenure/internal/testenv/harness"
	"github.com/tenurehq/tenure/storage"
)

// uiBound is how long a view may take to show a change of the cluster: a
// shard move or a detach (within harness.WatchBound) plus two of the
// page's 2 s polls.
const uiBound = harness.WatchBound + 4*time.Second

// testid is the CSS selector of the elements with data-testid id.
func testid(id string) string { return `[data-testid="` + id + `"]` }

// TestConsoleInBrowser opens every view of the console of one runner of a
// three-runner cluster in headless Chromium, checks the shard map against
// `tenure status -o json`, calls a counter and reads its state, finds a
// task and a schedule, changes the dynamic config, sees a partitioned
// runner detach on the timeline, drains a runner from the page and sees
// its shards move, and checks that actions need the admin token.
func TestConsoleInBrowser(t *testing.T) {
	c := newCluster(t, "r1", "r2", "r3")
	c.waitBalanced(t, []string{"r1", "r2", "r3"})
	r1 := c.runners["r1"]
	b := newBrowser(t, 1280, 800)

	// The cluster view, opened with the token in the fragment.
	b.run("open the console", chromedp.Navigate(r1.admin()+"/ui/#token="+adminToken))
	b.until("three attached runners in the cluster view", uiBound, `(() => {
		const rows = [...document.querySelectorAll('`+testid("runner-row")+`')];
		const att = rows.map(r => r.dataset.runner + '=' + ((r.querySelector('[data-field="attached"]') || {dataset: {}}).dataset.value || ''));
		const ok = rows.length === 3 && att.every(a => a.endsWith('=true'));
		return {ok, why: att.join(' ')};
	})()`)
	var weight struct {
		Bytes     float64 `json:"bytes"`
		Resources int     `json:"resources"`
	}
	if err := b.eval(`(() => {
		const es = performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'));
		return {bytes: es.reduce((a, e) => a + (e.transferSize || 0), 0), resources: es.length};
	})()`, &weight); err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster view page weight: %.0f bytes transferred in %d requests (the page, its assets and its first API polls)", weight.Bytes, weight.Resources)
	var hash string
	if err := b.eval(`location.hash`, &hash); err != nil || strings.Contains(hash, adminToken) {
		t.Fatalf("the token stays in the address bar: %q (%v)", hash, err)
	}
	b.screenshot("cluster")

	t.Run("shard map matches tenure status", func(t *testing.T) {
		b.run("open the shard map", chromedp.Click(sel("nav-shards")))
		c.shardMapMatchesStatus(t, b)
		b.screenshot("shards")
		// Keyboard: a shard cell takes the focus and Enter opens it.
		b.run("open a shard by keyboard", chromedp.Focus(sel("shard-cell")), chromedp.KeyEvent("\r"))
		b.until("the shard detail with its lock history", uiBound, `(() => {
			const d = document.querySelector('`+testid("shard-detail")+`');
			const text = d ? d.textContent : '';
			return {ok: !!d && d.offsetParent !== null && /acquired/i.test(text), why: text.slice(0, 200)};
		})()`)
	})

	t.Run("counter called and its state read", func(t *testing.T) {
		b.run("open the entities view", chromedp.Click(sel("nav-entities")),
			chromedp.WaitVisible(sel("entity-type")),
			chromedp.SetValue(sel("entity-type"), "counter"),
			chromedp.SetValue(sel("entity-id"), "e2e-c1"),
			chromedp.Click(sel("entity-lookup")))
		b.until("the counter's operations", uiBound, `(() => {
			const s = document.querySelector('`+testid("entity-op")+`');
			const ops = s ? [...s.options].map(o => o.value) : [];
			const add = ops.find(o => o.toLowerCase() === 'add');
			if (add) { s.value = add; s.dispatchEvent(new Event('change', {bubbles: true})); }
			return {ok: !!add, why: 'operations ' + ops.join(',')};
		})()`)
		b.run("call add 5", chromedp.SetValue(sel("entity-input"), `{"add": 5}`),
			chromedp.Click(sel("entity-call")))
		b.until("the call's output", uiBound, `(() => {
			const o = document.querySelector('`+testid("entity-call-output")+`');
			const text = o ? o.textContent : '';
			return {ok: /"total":\s*5\b/.test(text), why: text.slice(0, 200)};
		})()`)
		b.run("look the counter up again", chromedp.Click(sel("entity-lookup")))
		b.until("the counter's durable state", uiBound, `(() => {
			const s = document.querySelector('`+testid("entity-state")+`');
			const text = s ? s.textContent : '';
			try { return {ok: JSON.parse(text).total === 5, why: text}; } catch (e) { return {ok: false, why: text.slice(0, 200)}; }
		})()`)
		b.screenshot("entities")
	})

	t.Run("a task found and opened", func(t *testing.T) {
		ref := c.submitCounterTask(t, r1)
		b.run("open the tasks view", chromedp.Click(sel("nav-tasks")))
		b.until("the task in the list", uiBound, fmt.Sprintf(`(() => {
			const rows = [...document.querySelectorAll('%s')].map(r => r.dataset.ref);
			return {ok: rows.includes(%q), why: rows.length + ' rows: ' + rows.slice(0, 5).join(' ')};
		})()`, testid("task-row"), ref))
		b.run("open the task", chromedp.Click(chromedp.CSS(fmt.Sprintf(`%s[data-ref=%q]`, testid("task-row"), ref))))
		b.until("the task's detail and history", uiBound, `(() => {
			const d = document.querySelector('`+testid("task-detail")+`');
			const text = d ? d.textContent : '';
			return {ok: /completed/.test(text) && /claimed/.test(text), why: text.slice(0, 300)};
		})()`)
		b.screenshot("tasks")
	})

	t.Run("a schedule listed with its last tick", func(t *testing.T) {
		if out, err := c.tenure("schedule", "create", "e2e-every-2s", "--cron", "@every 2s", "counter",
			"--entity", "e2e-sched", "--input", `{"add":1}`); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		b.run("open the schedules view", chromedp.Click(sel("nav-schedules")))
		// The row shows the schedule, then the tick its driver reached, on
		// time, nothing missed and its chain going on.
		// A tick is on time when its driver reaches it within the 2 s
		// grace; on a loaded machine the first ones can be late, so the
		// wait covers several ticks. The page's banner and the time of its
		// last good poll say why when it does not come.
		b.until("the schedule with its last tick, fired on time", time.Minute, `(() => {
			const poll = 'updated ' + ((document.querySelector('`+testid("last-updated")+`') || {}).textContent || '?') +
				'; banner: ' + ((document.querySelector('`+testid("banner")+`') || {}).textContent || 'none') + '; row: ';
			const row = [...document.querySelectorAll('`+testid("schedule-row")+`')].find(r => r.dataset.name === 'e2e-every-2s');
			if (!row) return {ok: false, why: poll + 'none'};
			const cell = id => (row.querySelector('[data-testid="' + id + '"]') || {textContent: ''}).textContent;
			const last = row.querySelector('`+testid("schedule-last")+` time');
			const ok = row.textContent.includes('@every 2s') && !!last && /on time/.test(cell('schedule-last')) &&
				cell('schedule-missed') === '0' && /on time/.test(cell('schedule-chain'));
			const hist = (row.querySelector('`+testid("schedule-last")+`') || {title: ''}).title;
			return {ok, why: poll + row.textContent.slice(0, 300) + ' (' + hist + ')'};
		})()`)
		// The page's JSON twin says the same.
		type lastRun struct {
			Status string `json:"status"`
			Result struct {
				Outcome string `json:"outcome"`
				Fired   string `json:"fired"`
			} `json:"result"`
		}
		type scheduleJSON struct {
			Name    string   `json:"name"`
			Missed  *int     `json:"missed"`
			Stopped string   `json:"stopped"`
			Last    *lastRun `json:"last"`
		}
		var v struct {
			Schedules []scheduleJSON `json:"schedules"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		code, body, err := get(ctx, r1.admin()+"/ui/api/schedules", adminToken)
		if err != nil || code != 200 || json.Unmarshal(body, &v) != nil {
			t.Fatalf("GET schedules: %d %v %.300s", code, err, body)
		}
		i := slices.IndexFunc(v.Schedules, func(s scheduleJSON) bool { return s.Name == "e2e-every-2s" })
		if i < 0 || v.Schedules[i].Last == nil || v.Schedules[i].Missed == nil || *v.Schedules[i].Missed != 0 || v.Schedules[i].Stopped != "" ||
			!strings.HasPrefix(v.Schedules[i].Last.Result.Fired, "cron-e2e-every-2s-") {
			t.Fatalf("GET schedules: %.600s", body)
		}
		b.screenshot("schedules")
	})

	t.Run("dynamic config changed from the page", func(t *testing.T) {
		b.run("open the config view", chromedp.Click(sel("nav-config")),
			chromedp.WaitVisible(sel("config-key")))
		// A refused change shows the validation's reason, naming the key.
		b.run("set an unknown key", chromedp.SetValue(sel("config-key"), "detachment.no_such_key"),
			chromedp.SetValue(sel("config-value"), "1"),
			chromedp.SetValue(sel("config-rollout"), "100"),
			chromedp.Click(sel("config-apply")))
		b.until("the refusal naming the key", uiBound, `(() => {
			const r = document.querySelector('`+testid("config-result")+`');
			const text = r ? r.textContent : '';
			return {ok: text.includes('detachment.no_such_key'), why: text.slice(0, 300)};
		})()`)
		b.run("set the recover window", chromedp.SetValue(sel("config-key"), "detachment.recover_window"),
			chromedp.SetValue(sel("config-value"), "600ms"),
			chromedp.SetValue(sel("config-rollout"), "100"),
			chromedp.Click(sel("config-apply")))
		var got struct {
			Version int64 `json:"version"`
		}
		testenv.WaitFor(t, "the change in etcd (tenure config get)", uiBound, func() bool {
			out, err := c.tenure("config", "get", "-o", "json")
			return err == nil && json.Unmarshal(out, &got) == nil && got.Version > 0 && strings.Contains(string(out), "600ms")
		})
		b.until("every runner applying the new version", uiBound, fmt.Sprintf(`(() => {
			const rows = [...document.querySelectorAll('%s')].map(r => r.textContent.replace(/\s+/g, ' '));
			const doc = (document.querySelector('%s') || {}).textContent || '';
			return {ok: rows.length === 3 && doc.includes('600ms') && rows.every(r => r.includes('%d')), why: rows.join(' | ')};
		})()`, testid("config-runner-row"), testid("config-document"), got.Version))
		b.screenshot("config")
	})

	t.Run("a partitioned runner detaches on the timeline", func(t *testing.T) {
		b.run("open the timeline", chromedp.Click(sel("nav-timeline")))
		c.runners["r3"].proxy.SetMode(testenv.Blackhole)
		b.until("r3 detached on the timeline", uiBound+4*time.Second, `(() => {
			const ev = [...document.querySelectorAll('`+testid("timeline-event")+`')].map(e => e.dataset.runner + ':' + e.dataset.kind);
			return {ok: ev.includes('r3:detached'), why: ev.slice(-8).join(' ')};
		})()`)
		b.screenshot("timeline")
		c.runners["r3"].proxy.SetMode(testenv.Pass)
		b.until("r3 attached again after its detach", uiBound+4*time.Second, `(() => {
			const ev = [...document.querySelectorAll('`+testid("timeline-event")+`')].filter(e => e.dataset.runner === 'r3').map(e => e.dataset.kind);
			const d = ev.indexOf('detached');
			return {ok: d >= 0 && ev.indexOf('attached', d) > d, why: ev.join(' ')};
		})()`)
	})

	t.Run("a runner drained from the page", func(t *testing.T) {
		c.waitBalanced(t, []string{"r1", "r2", "r3"})
		b.run("open the cluster view", chromedp.Click(sel("nav-cluster")),
			chromedp.WaitVisible(sel("drain-r2")))
		b.run("drain r2", chromedp.Click(sel("drain-r2")))
		b.confirm("the drain")
		b.run("open the shard map", chromedp.Click(sel("nav-shards")))
		b.until("r2's shards moved to r1 and r3", uiBound, `(() => {
			const cells = [...document.querySelectorAll('`+testid("shard-cell")+`')];
			const held = cells.filter(c => c.dataset.holder === 'r1' || c.dataset.holder === 'r3').length;
			return {ok: cells.length === 16 && held === 16, why: cells.map(c => c.dataset.holder || '-').join(',')};
		})()`)
		c.shardMapMatchesStatus(t, b)
	})

	t.Run("actions need the admin token", func(t *testing.T) {
		code, body, err := get(context.Background(), r1.admin()+"/ui/api/tasks", "")
		if err != nil || code != 401 {
			t.Fatalf("GET /ui/api/tasks without the token: %d %s (%v), want 401", code, body, err)
		}
		b.run("forget the token", script(`sessionStorage.clear()`), chromedp.Reload(),
			chromedp.Click(sel("nav-entities")),
			chromedp.WaitVisible(sel("entity-type")),
			chromedp.SetValue(sel("entity-type"), "counter"),
			chromedp.SetValue(sel("entity-id"), "e2e-c1"),
			chromedp.Click(sel("entity-lookup")))
		b.until("the token box and the refusal", uiBound, `(() => {
			const box = document.querySelector('`+testid("auth-token")+`');
			const banner = (document.querySelector('`+testid("banner")+`') || {}).textContent || '';
			const state = (document.querySelector('`+testid("entity-state")+`') || {}).textContent || '';
			return {ok: !!box && box.offsetParent !== null && !/"total"/.test(state), why: banner.slice(0, 200)};
		})()`)
	})

	t.Run("every view fits a narrow window", func(t *testing.T) {
		nb := newBrowser(t, 400, 800)
		nb.run("open the console narrow", chromedp.Navigate(r1.admin()+"/ui/#token="+adminToken))
		for _, view := range []string{"cluster", "shards", "timeline", "entities", "tasks", "schedules", "config"} {
			nb.run("open "+view, chromedp.Click(sel("nav-"+view)))
			nb.until(view+" without a page-wide horizontal scroll", uiBound, `(() => {
				const w = document.documentElement.scrollWidth, v = window.innerWidth;
				return {ok: w <= v + 1, why: 'scrollWidth ' + w + ' > innerWidth ' + v};
			})()`)
		}
	})
}

// waitBalanced waits until every shard is locked and each of ids holds
// some.
func (c *cluster) waitBalanced(t *testing.T, ids []string) {
	t.Helper()
	st, err := c.Store(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, fmt.Sprintf("all %d shards held, by each of %v", c.Meta.Shards, ids), 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		own, err := harness.Holders(ctx, st)
		if err != nil || len(own) != c.Meta.Shards {
			return false
		}
		per := map[string]int{}
		for _, r := range own {
			per[r]++
		}
		for _, id := range ids {
			if per[id] == 0 {
				return false
			}
		}
		return true
	})
}

// shardMapMatchesStatus waits until the page's shard map and `tenure
// status -o json` agree on how many shards each runner holds and how many
// none does.
func (c *cluster) shardMapMatchesStatus(t *testing.T, b *browser) {
	t.Helper()
	var page, cli map[string]int
	err := harnessAwait(uiBound, func() (bool, string, error) {
		var cells []struct {
			Shard  string `json:"shard"`
			Holder string `json:"holder"`
			State  string `json:"state"`
		}
		if err := b.eval(`[...document.querySelectorAll('`+testid("shard-cell")+`')].map(c => ({shard: c.dataset.shard, holder: c.dataset.holder || '', state: c.dataset.state || ''}))`, &cells); err != nil {
			return false, err.Error(), nil
		}
		page = map[string]int{}
		for _, cell := range cells {
			page[cell.Holder]++
		}
		out, err := c.tenure("status", "-o", "json")
		if err != nil {
			return false, err.Error(), nil
		}
		var rep struct {
			Shards        int `json:"shards"`
			ShardsUnowned int `json:"shards_unowned"`
			Runners       []struct {
				ID    string `json:"id"`
				Owned int    `json:"owned"`
			} `json:"runners"`
		}
		if err := json.Unmarshal(out, &rep); err != nil {
			return false, "", fmt.Errorf("tenure status -o json: %w: %s", err, out)
		}
		cli = map[string]int{}
		if rep.ShardsUnowned > 0 {
			cli[""] = rep.ShardsUnowned
		}
		for _, r := range rep.Runners {
			if r.Owned > 0 {
				cli[r.ID] = r.Owned
			}
		}
		return len(cells) == c.Meta.Shards && maps.Equal(page, cli), fmt.Sprintf("page %v, tenure status %v", page, cli), nil
	})
	if err != nil {
		t.Fatalf("the shard map disagrees with tenure status -o json: %v", err)
	}
	t.Logf("shard map agrees with tenure status: %v (runners %v)", page, slices.Sorted(maps.Keys(page)))
}

// harnessAwait polls cond every 250 ms for at most within.
func harnessAwait(within time.Duration, cond func() (bool, string, error)) error {
	return harness.Await(context.Background(), within, 250*time.Millisecond, cond)
}

// submitCounterTask submits a counter task through r's client and waits for
// it to complete; it returns its ref.
func (c *cluster) submitCounterTask(t *testing.T, m *member) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := m.r.Client(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tk, _, err := cl.Submit(ctx, task.SubmitRequest{Type: "counter", Entity: "e2e-task", Op: "add", Input: json.RawMessage(`{"add":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	done, err := cl.Wait(ctx, tk.Ref(), 50*time.Millisecond)
	if err != nil || done.Status != task.Completed {
		t.Fatalf("task %s: %v %v", tk.Ref(), statusOf(done), err)
	}
	return tk.Ref()
}

func statusOf(t *task.Task) string {
	if t == nil {
		return "unknown"
	}
	return string(t.Status)
}

var _ = storage.DefaultGroup
