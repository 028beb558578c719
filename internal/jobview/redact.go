package jobview

import (
	"encoding/json"
	"strings"

	"github.com/sluicehq/sluice/internal/job"
	"github.com/sluicehq/sluice/internal/wire"
)

// Redacted replaces the value of a secret-looking header of an http job in
// every view of the job (GET, DELETE, replay, dead letters). The stored job
// keeps the real value: the worker sends it.
const Redacted = "[redacted]"

// secretHeaderWords are the parts of a header name (lowercased, without
// '-' and '_') that mark its value as a credential: Authorization,
// Proxy-Authorization, Cookie, X-Api-Key, X-Auth-Token, X-Client-Secret, …
var secretHeaderWords = []string{"auth", "token", "secret", "cookie", "apikey", "password", "passwd", "credential", "session", "signature"}

var headerSeparators = strings.NewReplacer("-", "", "_", "")

// SecretHeader reports whether the value of the header name must not be
// shown back: its name, case-insensitive and ignoring '-' and '_', holds
// one of secretHeaderWords.
func SecretHeader(name string) bool {
	n := headerSeparators.Replace(strings.ToLower(name))
	for _, w := range secretHeaderWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// RedactedJob is body (a stored job's canonical JSON) as views show it: an
// http job's secret headers (SecretHeader) hold redacted. Every other body,
// and an http job without such headers, is returned unchanged; a redacted
// one is the job re-encoded the way job.Spec.Canonical encodes it.
func RedactedJob(body json.RawMessage) json.RawMessage {
	var spec job.Spec
	if json.Unmarshal(body, &spec) != nil || spec.Type != wire.TypeHTTP {
		return body
	}
	changed := false
	for name := range spec.Headers {
		if SecretHeader(name) {
			spec.Headers[name], changed = Redacted, true
		}
	}
	if !changed {
		return body
	}
	out, err := json.Marshal(spec)
	if err != nil {
		return nil // never show what could not be redacted
	}
	return out
}
