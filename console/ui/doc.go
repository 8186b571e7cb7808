// Package ui is the web console's front end: one HTML shell, a style sheet
// and plain JavaScript modules, embedded in the binary and served under
// Prefix by every runner's admin server.
//
// The pages read only the console's JSON API (package console, under
// /ui/api/), so what a person sees is what a script can fetch. Nothing is
// loaded from elsewhere: no CDN, no web fonts, no build step. The assets
// are revalidated on every load (Cache-Control: no-cache with an ETag of
// their content), so a new binary's pages are picked up at once, and they
// are served with a Content-Security-Policy that allows only this origin's
// scripts, styles and API, because the pages show user data (entity state,
// task inputs) that must never run as code.
package ui
