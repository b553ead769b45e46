package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// epochTime is the fixed modification time of every tar entry, so the same
// tree always yields the same bytes (a retried run is a duplicate, not a
// conflict).
var epochTime = time.Unix(0, 0).UTC()

// ManifestEntry describes one regular file of the snapshot.
type ManifestEntry struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`   // bytes
	SHA256 string `json:"sha256"` // hex
}

// Manifest lists every regular file of the snapshot, sorted by path. It is
// the first entry of the archive, MANIFEST.json.
type Manifest struct {
	Root  string          `json:"root"` // the directory's base name, never the absolute path
	Files []ManifestEntry `json:"files"`
	Bytes int64           `json:"bytes"` // sum of file sizes
}

// writeSnapshot writes a deterministic gzip'd tar of the regular files under
// root to w (buildManifest, then writeArchive) and returns the manifest.
func writeSnapshot(w io.Writer, root string) (Manifest, error) {
	m, err := buildManifest(root)
	if err != nil {
		return Manifest{}, err
	}
	return m, writeArchive(w, root, m)
}

// buildManifest lists and hashes the regular files under root, sorted by
// path. Symlinks and special files are skipped.
func buildManifest(root string) (Manifest, error) {
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return Manifest{}, fmt.Errorf("snapshot: walk %s: %w", root, err)
	}
	sort.Strings(paths)
	m := Manifest{Root: filepath.Base(root), Files: make([]ManifestEntry, 0, len(paths))}
	for _, p := range paths {
		sum, n, err := hashFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			return Manifest{}, err
		}
		m.Files = append(m.Files, ManifestEntry{Path: p, Size: n, SHA256: sum})
		m.Bytes += n
	}
	return m, nil
}

// writeArchive writes the gzip'd tar of m's files to w: MANIFEST.json first,
// then every file in path order with mode 0644, uid/gid 0 and a fixed mtime.
// A file whose size changed since the manifest is an error. It never holds
// more than one copy buffer in memory.
func writeArchive(w io.Writer, root string, m Manifest) error {
	gz, err := gzip.NewWriterLevel(w, gzip.BestSpeed)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	man, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return err
	}
	if err := writeEntry(tw, "MANIFEST.json", int64(len(man)), func(dst io.Writer) error {
		_, err := dst.Write(man)
		return err
	}); err != nil {
		return err
	}
	for _, e := range m.Files {
		if err := writeEntry(tw, m.Root+"/"+e.Path, e.Size, func(dst io.Writer) error {
			f, err := os.Open(filepath.Join(root, filepath.FromSlash(e.Path)))
			if err != nil {
				return err
			}
			defer f.Close()
			n, err := io.Copy(dst, f)
			if err == nil && n != e.Size {
				err = fmt.Errorf("snapshot: %s changed size while archiving (%d, then %d bytes)", e.Path, e.Size, n)
			}
			return err
		}); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func writeEntry(tw *tar.Writer, name string, size int64, body func(io.Writer) error) error {
	hdr := &tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: epochTime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("snapshot: %s: %w", name, err)
	}
	return body(tw)
}

func hashFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("snapshot: read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// manifestDigest is the hex sha256 of the manifest's JSON: a stable name for
// one state of the tree.
func manifestDigest(m Manifest) string {
	b, _ := json.Marshal(m)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
