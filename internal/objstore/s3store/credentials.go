package s3store

import (
	"net/http"
	"os"
	"path/filepath"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Credential modes (s3.credentials, DESIGN.md "Security").
const (
	// CredentialsAuto tries, in order: s3.access_key/s3.secret_key when
	// set, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, MINIO_ROOT_USER/
	// MINIO_ROOT_PASSWORD (or MINIO_ACCESS_KEY/MINIO_SECRET_KEY), the shared
	// credentials file (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials,
	// profile AWS_PROFILE or default), then IAM (web identity through
	// AWS_WEB_IDENTITY_TOKEN_FILE, container credentials, instance
	// metadata). The empty mode is auto.
	CredentialsAuto = "auto"
	// CredentialsStatic uses s3.access_key and s3.secret_key only.
	CredentialsStatic = "static"
)

// credSource is one provider of the credential chain and how `config
// show` names it.
type credSource struct {
	name     func() string
	provider credentials.Provider
	local    bool // answers without the network
}

// credSources is the chain of c's mode; client is what IAM calls its
// endpoints with.
func (c Config) credSources(client *http.Client) []credSource {
	var out []credSource
	if c.AccessKey != "" || c.SecretKey != "" {
		out = append(out, credSource{
			name: func() string { return "config s3.access_key" },
			provider: &credentials.Static{Value: credentials.Value{
				AccessKeyID: c.AccessKey, SecretAccessKey: c.SecretKey, SignerType: credentials.SignatureV4}},
			local: true,
		})
	}
	if c.Credentials == CredentialsStatic {
		return out
	}
	return append(out,
		credSource{name: func() string { return "environment AWS_ACCESS_KEY_ID" }, provider: &credentials.EnvAWS{}, local: true},
		credSource{name: func() string {
			if os.Getenv("MINIO_ROOT_USER") != "" {
				return "environment MINIO_ROOT_USER"
			}
			return "environment MINIO_ACCESS_KEY"
		}, provider: &credentials.EnvMinio{}, local: true},
		credSource{name: sharedFileName, provider: &credentials.FileAWSCredentials{}, local: true},
		credSource{name: iamName, provider: &credentials.IAM{Client: client}},
	)
}

// sharedFileName names the shared credentials file and profile that
// credentials.FileAWSCredentials reads.
func sharedFileName() string {
	file := os.Getenv("AWS_SHARED_CREDENTIALS_FILE")
	if file == "" {
		home, _ := os.UserHomeDir()
		file = filepath.Join(home, ".aws", "credentials")
	}
	profile := os.Getenv("AWS_PROFILE")
	if profile == "" {
		profile = "default"
	}
	return "shared credentials file " + file + " profile " + profile
}

// iamName names the IAM source the environment selects.
func iamName() string {
	switch {
	case os.Getenv("AWS_WEB_IDENTITY_TOKEN_FILE") != "":
		return "IAM web identity AWS_WEB_IDENTITY_TOKEN_FILE"
	case os.Getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") != "" || os.Getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI") != "":
		return "IAM container credentials"
	}
	return "IAM instance metadata (asked at the first request; anonymous if it does not answer)"
}

// CredentialSource names the source that supplies c's keys, in the chain
// order of c.Credentials, for `fencepub config show`: "config
// s3.access_key", "environment AWS_ACCESS_KEY_ID", "shared credentials file
// PATH profile P", an IAM source, or "none" in static mode without keys. It
// reads the environment and the shared credentials file but does not ask
// IAM (the IAM source is named, not asked) and never returns a key.
func CredentialSource(c Config) string {
	cc := &credentials.CredContext{Client: &http.Client{}}
	for _, s := range c.credSources(nil) {
		if !s.local {
			return s.name()
		}
		if v, _ := s.provider.RetrieveWithCredContext(cc); v.AccessKeyID != "" || v.SecretAccessKey != "" {
			return s.name()
		}
	}
	return "none"
}
