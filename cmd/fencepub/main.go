// Command fencepub publishes batch results through an object store so that a
// paused or stale worker can never overwrite a newer result. See README.md.
// The benchmark suite is a separate binary, harness/cmd/fencepub-bench in the harness module, so that
// this one links no plotting code.
package main

import "github.com/fencepub/fencepub/internal/cli"

func main() { cli.Main(newRootCmd()) }
