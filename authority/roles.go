package authority

// RollbackKey is the etcd key of ns's rolled-back-counter alarm: an acquire
// that finds a grant marker of another request writes it (create-only) and
// every later acquire reads it and refuses; recover deletes it (DESIGN.md
// invariant 3). Role definitions name it, since workers must be able to
// raise the alarm (DESIGN.md "Security").
func RollbackKey(ns Namespace) string { return (&Authority{ns: ns}).rollbackKey() }
