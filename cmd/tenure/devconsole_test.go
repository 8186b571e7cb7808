//go:build !release

package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestDevPrintsConsoleURL: tenure dev's ready text names the web console
// on the first runner, after the runner lines, with the admin token in
// the fragment; the -o json line carries it as console_url.
func TestDevPrintsConsoleURL(t *testing.T) {
	r := DevReady{Event: "ready", Cluster: "dev", Config: "/tmp/x/tenure.yaml",
		Runners:    []DevReadyRunner{{ID: "dev-1", AdminAddr: "127.0.0.1:23910"}, {ID: "dev-2", AdminAddr: "127.0.0.1:23911"}},
		ConsoleURL: consoleURL("127.0.0.1:23910", "0a1b2c")}
	out := devText(r, true)
	runner2 := strings.Index(out, "runner dev-2 admin http://127.0.0.1:23911")
	console := strings.Index(out, "  console http://127.0.0.1:23910/ui/#token=0a1b2c\n")
	if runner2 < 0 || console < runner2 {
		t.Errorf("tenure dev's text does not name the console after the runners:\n%s", out)
	}
	b, _ := json.Marshal(r)
	if !strings.Contains(string(b), `"console_url":"http://127.0.0.1:23910/ui/#token=0a1b2c"`) {
		t.Errorf("ready line %s lacks console_url", b)
	}
	if got := devText(DevReady{Cluster: "dev"}, true); strings.Contains(got, "console") {
		t.Errorf("without runners there is no console to name:\n%s", got)
	}
}
