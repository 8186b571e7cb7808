// Package grafana holds tenure-dashboard.json, a Grafana dashboard of the
// Prometheus metrics Tenure runners export (DESIGN §10). The package has no
// code; its tests check that the dashboard parses, that its queries name
// only metrics the code registers, and that the metrics an operator needs
// each have a panel.
package grafana
