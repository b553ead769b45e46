package memstore_test

import (
	"testing"

	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/memstore"
	"github.com/fencepub/fencepub/storetest"
)

func TestAcceptance(t *testing.T) {
	storetest.AcceptanceTest(t, func(*testing.T) objstore.Store { return memstore.New("fencepub", nil) })
}
