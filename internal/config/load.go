package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"
)

// Environment variables read by FromFlags and Load.
const (
	EnvConfig   = "SLUICE_CONFIG"    // the configuration file, when --config is not given
	EnvRedisURL = "SLUICE_REDIS_URL" // overrides redis.url
	EnvListen   = "SLUICE_LISTEN"    // overrides listen
)

// FromFlags is what both binaries call with os.Args[1:] and os.Getenv: it
// parses --config PATH (or -config) from args, falls back to $SLUICE_CONFIG
// when the flag is absent or empty, and calls Load. With neither, no file is
// read and the defaults apply. Any other flag or argument is an error; so is
// -h, whose error wraps flag.ErrHelp and carries the usage.
func FromFlags(args []string, getenv func(string) string) (*Config, error) {
	const usage = "usage: --config PATH (YAML; default $" + EnvConfig + ", else built-in defaults)"
	fs := flag.NewFlagSet("sluice", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	path := fs.String("config", "", "YAML configuration file")
	if err := fs.Parse(args); err != nil {
		return nil, fmt.Errorf("parse flags: %w (%s)", err, usage)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("parse flags: unexpected argument %q (%s)", fs.Arg(0), usage)
	}
	if *path == "" && getenv != nil {
		*path = getenv(EnvConfig)
	}
	return Load(*path, getenv)
}

// Load reads the YAML file at path ("" = no file), applies $SLUICE_REDIS_URL,
// $SLUICE_LISTEN, $SLUICE_SECRETS_KEY and $SLUICE_SECRETS_KEY_ID from getenv when set (nil getenv = no environment),
// hashes plaintext API keys, fills in defaults and validates. An empty file
// is the same as no file. Unknown keys, bad values and a second YAML document
// are errors; every problem found is reported at once.
func Load(path string, getenv func(string) string) (*Config, error) {
	var c Config
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read config: %w", err)
		}
		if err := decode(data, &c); err != nil {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
	}
	c.Auth.hashPlaintextKeys()
	if getenv != nil {
		if v := getenv(EnvRedisURL); v != "" {
			c.Redis.URL = v
		}
		if v := getenv(EnvListen); v != "" {
			c.Listen = v
		}
		if v := getenv(EnvSecretsKey); v != "" {
			c.Secrets.Key = v
		}
		if v := getenv(EnvSecretsKeyID); v != "" {
			c.Secrets.KeyID = v
		}
	}
	out := c.WithDefaults()
	if err := out.validate(); err != nil {
		return nil, fmt.Errorf("invalid config %s:\n%w", displayPath(path), err)
	}
	return out, nil
}

// decode reads one YAML document into c with unknown keys rejected.
func decode(data []byte, c *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // empty file
		}
		return fmt.Errorf("decode YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("decode YAML: want one document, found more")
	}
	return nil
}

func displayPath(path string) string {
	if path == "" {
		return "(no file)"
	}
	return path
}
