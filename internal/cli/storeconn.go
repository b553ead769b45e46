package cli

import (
	"errors"
	"fmt"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/spf13/cobra"
)

// explainStore makes an error that ends a command because the object
// store was unavailable (objstore.ErrUnavailable in its chain, exit 115;
// explainErrors) say what to check, as the etcd path does
// (etcdConnectError): the configured endpoint and bucket, whether the
// store is up, and the keys that name it. The exit code is kept.
func explainStore(cmd *cobra.Command) {
	explainErrors(cmd, func(c *cobra.Command, err error) error {
		if !errors.Is(err, objstore.ErrUnavailable) || ExitCode(err, false) != exitcode.Unavailable {
			return err
		}
		lc, lerr := LoadConfig(c) // it loaded before the command could reach the store
		if lerr != nil {
			return err
		}
		s3 := lc.Config.S3
		return exitcode.With(exitcode.Unavailable, fmt.Errorf("the object store at %s (bucket %q) is unavailable (%w); is it up, and are s3.endpoint (--s3-endpoint) and s3.secure right?",
			s3.Endpoint, s3.Bucket, err))
	})
}
