// Command fencepub publishes batch results through an object store so that a
// paused or stale worker can never overwrite a newer result. See README.md.
// The benchmark suite is a separate binary in the harness module,
// harness/cmd/fencepub-bench, so that this one links no plotting code.
package main

import "github.com/fencepub/fencepub/internal/cli"

func main() { cli.Main(newRootCmd()) }
