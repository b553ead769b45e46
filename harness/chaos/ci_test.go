package chaos

import "time"

// The bounded CI run: these seeds plus one random seed, each for
// ciDuration, on the multi-node topology (Topology). Together they plan
// every fault kind (TestCISeedsCoverEveryFault).
var ciSeeds = []int64{1, 17, 25}

const (
	ciDuration  = 30 * time.Second
	ciProcesses = 3
)
