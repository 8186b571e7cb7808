// Package grafana holds tenure-dashboard.json, a Grafana dashboard of the
// Prometheus metrics Tenure runners export (docs/operations.md, "Metrics and
// alerts"). The package has no code; its tests check that the dashboard
// parses, that its queries name only metrics the code registers, and that
// every metric family the code registers has a panel.
package grafana
