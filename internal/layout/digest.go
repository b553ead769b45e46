package layout

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
)

// groupDigestTag versions the group digest encoding.
const groupDigestTag = "fencepub.group-digest.v1"

// GroupDigest returns a group's request digest, 64 lowercase hex digits:
// sha256 over a tag and each member's resource name and request digest,
// in resource-name order (resources[i] has digests[i]). A group publish's
// op records hold it (DESIGN.md "Groups").
func GroupDigest(resources, digests []string) string {
	order := make([]int, len(resources))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(resources[a], resources[b]) })
	h := sha256.New()
	h.Write([]byte(groupDigestTag + "\n"))
	for _, i := range order {
		fmt.Fprintf(h, "%d:%s %s\n", len(resources[i]), resources[i], digests[i])
	}
	return hex.EncodeToString(h.Sum(nil))
}
