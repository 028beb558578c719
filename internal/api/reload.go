package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/bucket"
	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/policy"
)

// Reloadable is what a configuration reload replaces in a running Server
// (Server.Reload): the file's API keys, the limits and the API limiter's
// costs, the policy defaults PUT merges over, and which tenants the file
// signs for. Each field means what the Options field of the same name
// does.
type Reloadable struct {
	Keys        map[string]config.KeyConfig
	APILimiter  bucket.Allower
	APILimit    bucket.Limit
	APIFailOpen bool
	APICosts    config.APICosts
	Limits      map[string]Limit
	Defaults    policy.Overrides
	FileSigned  func(tenant string) bool
}

// Reload replaces the reloadable part of the server's options at once: a
// request already past a field keeps what it read, the next reads the
// new. Safe for concurrent use.
func (s *Server) Reload(r Reloadable) {
	r.APICosts = r.APICosts.WithDefaults()
	keys := r.Keys
	s.keys.file.Store(&keys)
	r.Keys = nil // held by the keyring
	s.reloadable.Store(&r)
}

// rt is the live reloadable options.
func (s *Server) rt() *Reloadable { return s.reloadable.Load() }

// ReloadRefusedError is a configuration file a reload refused as a whole:
// every problem, the running configuration kept.
type ReloadRefusedError struct {
	Problems []string
}

func (e *ReloadRefusedError) Error() string {
	return "configuration refused, the running one kept: " + strings.Join(e.Problems, "; ")
}

// reloadAnswer is the body of a reload's 200.
type reloadAnswer struct {
	// Changes are what the reload changed, one line each (never a secret);
	// empty when the file was as running.
	Changes []string `json:"changes"`
}

// reload is POST /v1/admin/reload (admin keys): re-reads the configuration
// file (Options.Reload). 200 with what changed; 422 with every problem of a
// file refused (nothing applied).
func (s *Server) reload(r *http.Request, c *call) (int, any, error) {
	if err := adminOnly(c); err != nil {
		return 0, nil, err
	}
	if s.opts.Reload == nil {
		return 0, nil, errorf(http.StatusNotFound, CodeNotFound, "this server has no configuration file to reload")
	}
	changes, err := s.opts.Reload(r.Context())
	var refused *ReloadRefusedError
	if errors.As(err, &refused) {
		return 0, nil, &Error{Status: http.StatusUnprocessableEntity, Code: CodeInvalid,
			Message: "the configuration file has problems; nothing was applied, the running configuration is kept", Problems: refused.Problems}
	}
	if err != nil {
		return 0, nil, s.redisFailure(r, "reload", err)
	}
	if changes == nil {
		changes = []string{}
	}
	return http.StatusOK, reloadAnswer{Changes: changes}, nil
}
