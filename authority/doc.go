// Package authority is the single source of fencing tokens for a fencepub
// domain: it grants leases on resources and mints each grant's generation in
// the same etcd transaction (DESIGN.md invariants 2 and 3).
package authority
