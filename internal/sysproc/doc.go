// Package sysproc holds the process attributes fencepub's harnesses give the
// servers and children they start, one file per operating system: on Linux
// a child is killed when its parent dies (Pdeathsig); on other Unix systems
// it is not, and the harness's own stop is the only cleanup. The detached
// servers of `fencepub dev up` get a session of their own everywhere.
package sysproc
