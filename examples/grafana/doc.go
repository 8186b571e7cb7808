// Package grafana holds tenure-dashboard.json, a Grafana dashboard of the
// Prometheus metrics Tenure runners export (docs/operations.md, "Metrics and
// alerts"). The package has no
// code; its tests check that the dashboard parses, that its queries name
// only metrics the code registers, and that the metrics an operator needs
// each have a panel.
package grafana
