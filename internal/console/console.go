// Package console is Sluice's operator console: static pages (HTML, CSS and
// ES modules, embedded, no build step, nothing fetched from elsewhere)
// served at /ui/ beside the API. The pages do everything through the public
// /v1 API with the API key the operator signs in with — kept in the tab's
// sessionStorage, sent as Authorization: Bearer, never in a cookie — so the
// console has no power of its own and no CSRF surface: what a key may not
// do, the API refuses (a read-only key's page shows no write buttons).
//
// Rules it keeps: nothing the API returns is parsed as HTML (the pages build
// DOM nodes; a test bans innerHTML, inline script, style attributes and
// foreign URLs); every /ui/ response carries the security headers (Headers: CSP
// script-src 'self', no framing, no referrer); With serves the console in
// front of the API. The read-only routes the pages use bound their own cost
// (see package api).
package console

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// Headers are set on every /ui/ response: no inline or foreign script or
// style (script-src 'self'), no framing, no referrer, no sniffing, and no
// caching of a page an older build served.
var Headers = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
	"X-Frame-Options":        "DENY",
	"Referrer-Policy":        "no-referrer",
	"X-Content-Type-Options": "nosniff",
	"Cache-Control":          "no-cache",
}

// Handler serves the embedded files under Prefix (index.html at Prefix),
// each answer with Headers; methods other than GET and HEAD get a 405.
func Handler() (http.Handler, error) {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		return nil, fmt.Errorf("console: the embedded files: %w", err)
	}
	files := http.StripPrefix(Prefix, http.FileServerFS(sub))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range Headers {
			w.Header().Set(k, v)
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		files.ServeHTTP(w, r)
	}), nil
}

// With serves the console at Prefix (and redirects /ui to it) in front of
// api, which serves every other path.
func With(api http.Handler) (http.Handler, error) {
	ui, err := Handler()
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(Prefix, ui)
	mux.Handle("/ui", http.RedirectHandler(Prefix, http.StatusMovedPermanently))
	mux.Handle("/", api)
	return mux, nil
}
