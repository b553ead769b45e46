package lab

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// datasets is the object store of case dataset: file objects and the
// manifest of every version written so far (DESIGN "Dataset versions").
type datasets struct {
	files     map[string]bool     // file key -> exists (false: deleted by GC)
	manifests map[string][]string // version -> the file keys its manifest names
	published map[string]bool     // versions the pointer has named
}

func newDatasets() *datasets {
	return &datasets{files: map[string]bool{}, manifests: map[string][]string{}, published: map[string]bool{}}
}

func (d *datasets) clone() *datasets {
	if d == nil {
		return nil
	}
	return &datasets{files: maps.Clone(d.files), manifests: maps.Clone(d.manifests), published: maps.Clone(d.published)}
}

// ownFile is the one file a version uploads under its own key prefix.
func ownFile(version string) string { return version + "/part-1" }

// upload writes version's own file and its manifest, naming the own file and
// the files c reuses from its base. Uploads come before the publish
// transaction, whatever its outcome.
func (d *datasets) upload(c *client, version string) {
	d.files[ownFile(version)] = true
	d.manifests[version] = append(slices.Clone(c.reuse), ownFile(version))
}

// publish records that version's manifest is now the pointer's, and reports
// a file it names that does not exist (MissingFile, DESIGN invariant 14).
// It does nothing outside case dataset.
func (d *datasets) publish(writer, version string) *finding {
	if d == nil {
		return nil
	}
	d.published[version] = true
	if f := d.missing(version); f != "" {
		return &finding{MissingFile, fmt.Sprintf(
			"%s's manifest %s is now published and names %s, which GC deleted", writer, version, f)}
	}
	return nil
}

// missing returns the first file version's manifest names that does not
// exist, or "".
func (d *datasets) missing(version string) string {
	for _, f := range d.manifests[version] {
		if !d.files[f] {
			return f
		}
	}
	return ""
}

// readBase makes the pointer's version c's base: c's next write reuses every
// file that version's manifest names. It returns a note for the event.
func (w *world) readBase(c *client) string {
	c.base = w.res.Version
	c.reuse = w.data.manifests[c.base]
	return fmt.Sprintf("base %s, reuses %s", c.base, strings.Join(c.reuse, ", "))
}

// collect is one GC pass. Retained is the pointer's version (the model has no
// reader grace period: a grace only delays deletion). Every file under the
// prefix of a published, no longer retained version is deleted unless the
// retained manifest names it. It returns a note naming the deleted files, and
// a MissingFile finding if the retained manifest names a deleted file.
func (w *world) collect() (string, *finding) {
	d := w.data
	keep := d.manifests[w.res.Version]
	var gone []string
	for f, ok := range d.files {
		v, _, _ := strings.Cut(f, "/")
		if ok && d.published[v] && v != w.res.Version && !slices.Contains(keep, f) {
			d.files[f] = false
			gone = append(gone, f)
		}
	}
	note := "deletes nothing"
	if len(gone) > 0 {
		slices.Sort(gone)
		note = "deletes " + strings.Join(gone, ", ")
	}
	if f := d.missing(w.res.Version); f != "" {
		return note, &finding{MissingFile, fmt.Sprintf(
			"GC deleted %s, which the published manifest %s names", f, w.res.Version)}
	}
	return note, nil
}

// member is one resource of a group: the (fence, op_seq) pair it compares and
// the version its pointer names. In case group, Resource counts only the
// applied writes (Effects).
type member struct {
	name    string
	fence   int
	seq     int
	version string
}

// writeGroup publishes s.Version to the group member s.Member, or to every
// member in one transaction when s.Member is "". Each member compares
// (fence, op_seq) as a single resource does; if any member is stale,
// nothing moves.
func (w *world) writeGroup(c *client, s Step) Outcome {
	t := c.token
	for _, m := range w.members {
		if s.Member != "" && m.name != s.Member {
			continue
		}
		if t.fence < m.fence || t.fence == m.fence && s.Seq <= m.seq {
			return Stale
		}
	}
	for i := range w.members {
		if m := &w.members[i]; s.Member == "" || m.name == s.Member {
			m.fence, m.seq, m.version = t.fence, s.Seq, s.Version
		}
	}
	w.res.Effects++
	return Applied
}

// readGroup reads every member's pointer at one revision and reports a torn
// pair (TornRead): members naming versions of different group publishes.
func (w *world) readGroup() (string, *finding) {
	seen := "sees " + w.pointers()
	for _, m := range w.members[1:] {
		if m.version != w.members[0].version {
			return seen, &finding{TornRead, fmt.Sprintf(
				"the reader saw %s=%s next to %s=%s, members of two different group publishes",
				w.members[0].name, w.members[0].version, m.name, m.version)}
		}
	}
	return seen, nil
}

// pointers renders the group members' versions as "member=version" pairs,
// "" outside case group.
func (w *world) pointers() string {
	var s []string
	for _, m := range w.members {
		v := m.version
		if v == "" {
			v = "none"
		}
		s = append(s, m.name+"="+v)
	}
	return strings.Join(s, " ")
}
