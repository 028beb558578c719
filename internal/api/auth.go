package api

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/store"
)

// KeyRefreshDefault is Options.KeyRefresh when unset: how often a server
// asks Redis whether the API keys by API changed, and writes the keys'
// last use. A key revoked or created on another throttler is seen within
// it (plus one read).
const KeyRefreshDefault = 500 * time.Millisecond

// keyring finds API keys by the SHA-256 of the presented token; it never
// holds a key itself. It serves from memory: the file's keys
// (Options.Keys, replaced by SetKeys on a reload) and the keys by API as
// last read from Redis (refresh, every Options.KeyRefresh), so
// authentication adds no Redis call to a request. An expired key by API is
// refused by the local clock. Each use is noted in memory and written by
// refresh, one HSET for all keys used since the last.
type keyring struct {
	file atomic.Pointer[map[string]config.KeyConfig] // by hash
	api  atomic.Pointer[apiKeyring]
	// used is name → last use (Unix µs) since the last flush.
	usedMu sync.Mutex
	used   map[string]int64
	now    func() time.Time
}

// apiKeyring is one read of the keys by API.
type apiKeyring struct {
	version string
	byHash  map[string]apiKeyEntry
	byName  map[string]store.APIKey
}

type apiKeyEntry struct {
	key     config.KeyConfig
	expires time.Time // zero: never
}

func newKeyring(file map[string]config.KeyConfig) *keyring {
	kr := &keyring{used: map[string]int64{}, now: time.Now}
	kr.file.Store(&file)
	kr.api.Store(&apiKeyring{})
	return kr
}

// authenticate returns the key for r's bearer token, or a 401.
func (kr *keyring) authenticate(r *http.Request) (*config.KeyConfig, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return nil, errorf(http.StatusUnauthorized, CodeUnauthorized, "missing Authorization: Bearer <api key>")
	}
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return nil, errorf(http.StatusUnauthorized, CodeUnauthorized, "Authorization must be Bearer <api key>")
	}
	hash := config.HashKey(token)
	now := kr.now()
	k, found := (*kr.file.Load())[hash]
	if !found {
		e, ok := kr.api.Load().byHash[hash]
		if !ok {
			return nil, errorf(http.StatusUnauthorized, CodeUnauthorized, "unknown API key")
		}
		if !e.expires.IsZero() && !now.Before(e.expires) {
			return nil, errorf(http.StatusUnauthorized, CodeUnauthorized, "API key %q expired at %s", e.key.Name, e.expires.Format(time.RFC3339))
		}
		k = e.key
	}
	kr.usedMu.Lock()
	kr.used[k.Name] = now.UnixMicro()
	kr.usedMu.Unlock()
	return &k, nil
}

// fileKey reports whether name is a key of the configuration file.
func (kr *keyring) fileKey(name string) bool {
	for _, k := range *kr.file.Load() {
		if k.Name == name {
			return true
		}
	}
	return false
}

// refresh reads the keys by API when their version changed (one HGET
// otherwise) and writes the last uses noted since the previous refresh.
func (kr *keyring) refresh(ctx context.Context, st *store.Store) error {
	if err := kr.flushUsed(ctx, st); err != nil {
		return err
	}
	v, err := st.APIKeysVersion(ctx)
	if err != nil || v == kr.api.Load().version {
		return err
	}
	return kr.reload(ctx, st)
}

// reload reads every key by API now.
func (kr *keyring) reload(ctx context.Context, st *store.Store) error {
	keys, version, err := st.APIKeys(ctx)
	if err != nil {
		return err
	}
	next := &apiKeyring{version: version, byHash: make(map[string]apiKeyEntry, len(keys)), byName: make(map[string]store.APIKey, len(keys))}
	for _, k := range keys {
		next.byName[k.Name] = k
		next.byHash[k.SHA256] = apiKeyEntry{expires: k.Expires,
			key: config.KeyConfig{Name: k.Name, SHA256: k.SHA256, Tenants: k.Tenants, Limits: k.Limits, Admin: k.Admin}}
	}
	kr.api.Store(next)
	return nil
}

// flushUsed writes the last uses noted since the previous flush; on an
// error they are noted again, unless a later use replaced them.
func (kr *keyring) flushUsed(ctx context.Context, st *store.Store) error {
	kr.usedMu.Lock()
	used := kr.used
	kr.used = make(map[string]int64, len(used))
	kr.usedMu.Unlock()
	if len(used) == 0 {
		return nil
	}
	at := make(map[string]time.Time, len(used))
	for name, us := range used {
		at[name] = time.UnixMicro(us)
	}
	err := st.TouchAPIKeys(ctx, at)
	if err != nil {
		kr.usedMu.Lock()
		for name, us := range used {
			if _, later := kr.used[name]; !later {
				kr.used[name] = us
			}
		}
		kr.usedMu.Unlock()
	}
	return err
}

// keyRefresher runs keyring.refresh every period until Stop.
type keyRefresher struct {
	kr     *keyring
	st     *store.Store
	period time.Duration
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Start reads the keys by API once (a failure is logged: the next period
// retries) and refreshes them every period in the background.
func (k *keyRefresher) Start(ctx context.Context) {
	ctx, k.cancel = context.WithCancel(ctx)
	k.done = make(chan struct{})
	if err := k.kr.reload(ctx, k.st); err != nil {
		k.log.Warn("read API keys by API; retrying", "err", err)
	}
	go func() {
		defer close(k.done)
		t := time.NewTicker(k.period)
		defer t.Stop()
		failing := false
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, cancel := context.WithTimeout(ctx, k.period)
			err := k.kr.refresh(rctx, k.st)
			cancel()
			switch {
			case err != nil && ctx.Err() == nil && !failing:
				failing = true
				k.log.Warn("refresh API keys by API: serving the last read until Redis answers", "err", err)
			case err == nil && failing:
				failing = false
				k.log.Info("API keys by API refreshed again")
			}
		}
	}()
}

// Stop ends the refresh and waits for it; idempotent, safe before Start.
func (k *keyRefresher) Stop() {
	k.once.Do(func() {
		if k.cancel != nil {
			k.cancel()
			<-k.done
		}
	})
}
