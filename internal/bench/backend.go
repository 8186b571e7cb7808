package bench

import (
	"context"
	"fmt"
)

// SkippedResult stands for a scenario that does not exist on the run's
// coordination backend: the report says so, and why, instead of failing
// the run.
type SkippedResult struct {
	Skipped bool   `json:"skipped"` // always true: tells it apart in JSON
	Reason  string `json:"reason"`
}

func (r *SkippedResult) rows() []row { return []row{{"skipped", r.Reason}} }

// etcdOnly are the scenarios that measure etcd itself, with why they have
// no counterpart on S3 coordination.
var etcdOnly = map[string]string{
	ScenarioDetach: "detach cuts a runner off from etcd with a TCP proxy and follows its etcd lease; with coordination on S3 there is no etcd to partition (a runner's lease is an S3 object it renews through the same connection as its tasks)",
}

// scenarioFunc returns the function that runs scenario on the run's
// backend: the scenario's own, or one that reports it skipped.
func (e *env) scenarioFunc(scenario string) func(context.Context, *env) (Result, error) {
	if why, ok := etcdOnly[scenario]; ok && e.o.onS3() {
		return func(context.Context, *env) (Result, error) {
			e.logf("%s: skipped: %s", scenario, why)
			return &SkippedResult{Skipped: true, Reason: fmt.Sprintf("not on coordination %s: %s", CoordinationS3, why)}, nil
		}
	}
	return scenarioFuncs[scenario]
}
