package bucket

// redisKey is the one Redis key of one limiter key:
// <prefix>:rl:{<name>:<key>}. The braces make the limit name and key the
// Cluster hash tag, so every script touches exactly one slot. NewLimiter keeps
// braces and ':' out of prefix and name; key is caller data (1..MaxKeyLen
// bytes) and cannot collide across limits because name holds no ':'.
func redisKey(prefix, name, key string) string {
	return prefix + ":rl:{" + name + ":" + key + "}"
}
