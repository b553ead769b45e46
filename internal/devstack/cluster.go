package devstack

import (
	"context"
	"path/filepath"
)

// Cluster is an etcd cluster and a MinIO deployment on loopback: the one
// topology tests and the chaos runs start (`fencepub dev up` starts the
// same servers through StartEtcd and StartMinIO or StartSeaweedFS).
type Cluster struct {
	Etcd  *Etcd
	MinIO *MinIO
}

// ClusterOptions configures StartCluster: Etcd.Members members and
// MinIO.Nodes MinIO processes (zero values: one of each).
type ClusterOptions struct {
	Etcd  EtcdOptions
	MinIO MinIOOptions
}

// MultiNode is the multi-node topology of the HA tests, the chaos runs and
// the recovery benches: a 3-member etcd and a 4-node distributed MinIO (two
// drives per node, one erasure set of 8), which keep a quorum through one
// etcd member and one MinIO node down (DESIGN.md invariant 12).
func MultiNode() ClusterOptions {
	return ClusterOptions{Etcd: EtcdOptions{Members: 3}, MinIO: MinIOOptions{Nodes: 4}}
}

// StartCluster starts the etcd cluster under dir/etcd and MinIO under
// dir/minio, and blocks until every member answers a read and every MinIO
// node a bucket call. On error nothing it started is left running.
// Errors: StartEtcd's and StartMinIO's.
func StartCluster(ctx context.Context, dir string, opts ClusterOptions) (*Cluster, error) {
	e, err := StartEtcd(ctx, filepath.Join(dir, "etcd"), opts.Etcd)
	if err != nil {
		return nil, err
	}
	m, err := StartMinIO(ctx, filepath.Join(dir, "minio"), opts.MinIO)
	if err != nil {
		e.Stop()
		return nil, err
	}
	return &Cluster{Etcd: e, MinIO: m}, nil
}

// Stop stops MinIO, then etcd.
func (c *Cluster) Stop() {
	c.MinIO.Stop()
	c.Etcd.Stop()
}
