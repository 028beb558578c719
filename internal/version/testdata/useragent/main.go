// Command useragent prints version.UserAgent(): TestBuiltBinary builds it
// the way scripts/run and the Dockerfile build Sluice's binaries.
package main

import (
	"fmt"

	"github.com/sluicehq/sluice/internal/version"
)

func main() { fmt.Println(version.UserAgent()) }
