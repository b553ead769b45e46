// Package exampletest tests the programs under examples/ from outside, as a
// user runs them: it builds each one, starts it against real etcd and MinIO
// (internal/testkit/testenv) with only public configuration (FENCEPUB_* variables),
// and talks to it over its own interface. The examples themselves import
// only public packages, so they can be copied into another module.
package exampletest
