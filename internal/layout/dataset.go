package layout

import (
	"fmt"
	"strings"
)

// Dataset versions (DESIGN.md "Dataset versions"). A dataset version's
// manifest index lives at the version's own key (ObjectKey); its files and
// manifest pages live under that key followed by a separator, so every key
// still carries its version and GC's rules apply to each file unchanged.
// The separators are not '/': stores on a file system (MinIO, SeaweedFS's
// filer) refuse an object "k" beside an object "k/x".
const (
	// FilesSep separates a version's key from a file's path.
	FilesSep = ".files/"
	// PagesSep separates a version's key from a manifest page's number.
	PagesSep = ".pages/"
)

// KindDataset is Pointer.Kind of a dataset version: its object is the
// manifest index. The empty Kind is a single object.
const KindDataset = "dataset"

// FileKey is the object key of the file at path (a manifest path) of the
// version whose own key is versionKey.
func FileKey(versionKey, path string) string { return versionKey + FilesSep + path }

// PageKey is the object key of manifest page n (from 0) of the version
// whose own key is versionKey: the number as 8 digits, so pages list in
// order.
func PageKey(versionKey string, n int) string {
	return fmt.Sprintf("%s%s%08d", versionKey, PagesSep, n)
}

// ParseVersionKey parses any object key of a version of res: the version's
// own key (ParseObjectKey's form), one of its files (FileKey) or one of its
// manifest pages (PageKey). It returns the version and the version's own
// key. ok is false for any other key (a foreign key, which GC never
// deletes).
func (n Namespace) ParseVersionKey(res, key string) (v Version, own string, ok bool) {
	own = key
	prefix := n.ObjectsPrefix(res)
	if end := len(prefix) + VersionWidth + 1 + NonceLen; len(key) > end && strings.HasPrefix(key, prefix) {
		own = key[:end]
		rest := key[end:]
		switch {
		case strings.HasPrefix(rest, FilesSep) && len(rest) > len(FilesSep):
		case strings.HasPrefix(rest, PagesSep) && len(rest) == len(PagesSep)+8 && isDigits(rest[len(PagesSep):]):
		default:
			return Version{}, "", false
		}
	}
	v, _, ok = n.ParseObjectKey(res, own)
	if !ok {
		return Version{}, "", false
	}
	return v, own, true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
