// Package redisscript runs Sluice's Lua scripts on Redis — the one runner of
// the store, the rate limiters and the dispatcher: a Script by
// EVALSHA (loaded when Redis does not know it), a function of a Redis
// Functions library by FCALL (the library loaded on every master when Redis
// lost it, EVALSHA when Redis has no Functions), many calls pipelined in one
// round trip (Batch), and checked reply decoding. Callers see Reply and
// Decoder values and errors wrapping ErrUnexpectedReply, never redis.Nil or
// a *redis.Cmd.
//
// Rules it keeps: a WAIT is only ever sent in the pipeline of the write it
// confirms (or after a write of its own, Confirm), on that write's node
// client — never through the Cluster client, which would send a keyless
// command to any node. ForEachMaster runs a function (a library load, a
// SCAN) on every master of a Cluster, or on the one Redis.
package redisscript

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
)

// ErrUnexpectedReply: a script's reply did not have the shape its header
// promises (nil, wrong type, missing element). It means a bug or a version
// skew between this binary and the data, never bad input.
var ErrUnexpectedReply = errors.New("unexpected script reply")

// Script is one Lua script: a name for error messages, its source and the
// hex SHA-1 of the source (its EVALSHA handle). Immutable; safe for
// concurrent use.
type Script struct {
	name string
	src  string
	sha  string
}

// New returns the Script name with source src.
func New(name, src string) *Script {
	sum := sha1.Sum([]byte(src))
	return &Script{name: name, src: src, sha: hex.EncodeToString(sum[:])}
}

// Name is the script's name, as given to New.
func (s *Script) Name() string { return s.name }

// Source is the script's Lua source.
func (s *Script) Source() string { return s.src }

// Hash is the hex SHA-1 of the source: what EVALSHA and SCRIPT LOAD use.
func (s *Script) Hash() string { return s.sha }
