package client_test

import (
	"errors"
	"os"
	"testing"

	"github.com/sluicehq/sluice/client"
)

// TestKeysAndReload: keys made, listed and revoked through the client on a
// running throttler; Reload answers what changed, or ErrInvalid with every
// problem of a bad file.
func TestKeysAndReload(t *testing.T) {
	t.Parallel()
	d := deploy(t, nil, false)
	ctx := ctxFor(t)
	k, err := d.admin.CreateKey(ctx, "ci", client.KeyOptions{Tenants: []string{"acme-*"}})
	if err != nil || k.Key == "" || k.Source != "api" {
		t.Fatalf("CreateKey: %+v, %v", k, err)
	}
	ci := newClient(t, d.url, k.Key)
	if _, err := ci.GetTenant(ctx, "acme-1"); err != nil {
		t.Fatalf("the new key: %v", err)
	}
	keys, err := d.admin.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var fileKey string
	for _, key := range keys {
		if key.Key != "" {
			t.Errorf("Keys shows the key of %q", key.Name)
		}
		if key.Source == "config" {
			fileKey = key.Name
		}
	}
	if fileKey == "" {
		t.Fatalf("Keys lists no key of the file: %+v", keys)
	}
	if err := d.admin.DeleteKey(ctx, fileKey); !errors.Is(err, client.ErrConflict) {
		t.Errorf("DeleteKey of a file key: %v, want ErrConflict", err)
	}
	if err := d.admin.DeleteKey(ctx, "ci"); err != nil {
		t.Fatal(err)
	}
	if _, err := ci.GetTenant(ctx, "acme-1"); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("the revoked key: %v, want ErrUnauthorized", err)
	}

	if changes, err := d.admin.Reload(ctx); err != nil || len(changes) != 0 {
		t.Fatalf("Reload of the running file: %v, %v", changes, err)
	}
	if err := os.WriteFile(d.cfg, []byte("limits: {search: {algorithm: gcra, rate: 1/s, burst: 0}}\nworker: {concurrency: -1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = d.admin.Reload(ctx)
	var e *client.Error
	if !errors.Is(err, client.ErrInvalid) || !errors.As(err, &e) || len(e.Problems) != 2 || e.Problems[0].Field != "limits.search.burst" {
		t.Errorf("Reload of a bad file: %v (problems %+v), want ErrInvalid with its 2 problems", err, e)
	}
}
