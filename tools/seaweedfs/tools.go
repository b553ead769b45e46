//go:build tools

// Package tools pins the SeaweedFS server (weed) for `make deps`.
package tools

import _ "github.com/seaweedfs/seaweedfs/weed"
