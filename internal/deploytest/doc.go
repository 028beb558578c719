// Package deploytest holds no code: its tests check the deployment files
// (docker-compose.yml, Dockerfile, deploy/) against the binaries and
// packages they describe, since nothing here can run Docker. They read the
// files from the module root and need no Redis.
package deploytest
