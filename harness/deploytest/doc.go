// Package deploytest checks the Kubernetes files of deploy/kubernetes
// against the Kubernetes API: every document decodes strictly into its
// k8s.io/api type, and the objects fit together as Kubernetes runs them
// (selectors select the pods, probes and the Service reach the container's
// port, credentials come from the Secret, a failed run is not restarted in
// place). It is in the harness module so that fencepub's go.mod carries no
// k8s.io module; cmd/fencepub's deploy tests check the same files against
// the CLI (commands, flags, configuration, environment).
package deploytest
