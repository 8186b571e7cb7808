package task

import "encoding/json"

// WithRef is a task as the CLI and the console print it in JSON: the
// stored task's fields with its "ref" (group/index/id, the handle every
// command and endpoint takes) first.
type WithRef struct{ T *Task }

// MarshalJSON encodes the task with "ref" in front.
func (w WithRef) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(w.T)
	if err != nil {
		return nil, err
	}
	ref, err := json.Marshal(w.T.Ref())
	if err != nil {
		return nil, err
	}
	out := append([]byte(`{"ref":`), ref...)
	if rest := b[1:]; len(rest) > 1 { // b is an object: "{" fields "}"
		out = append(out, ',')
	}
	return append(out, b[1:]...), nil
}
