// Package e2e drives the web console in a real browser: headless Chromium,
// through the Chrome DevTools protocol (chromedp), against a cluster of
// three in-process runners on the embedded etcd and S3 servers. It is a
// module of its own so that the browser driver is not a requirement of the
// tenure module; `make test` runs it, and `.ci/run` installs Chromium from
// the distribution's packages. Set TENURE_CHROMIUM to use another browser
// binary, and TENURE_E2E_SCREENSHOTS to a directory to write the main
// views' screenshots there (docs/console/ holds the committed ones).
package e2e
