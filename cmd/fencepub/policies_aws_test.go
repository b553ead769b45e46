package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// iamPolicy is an IAM identity policy document as examples/policies writes
// them. Decoding is strict: a field not below (NotAction, NotResource,
// Principal, ...) is refused rather than ignored, so no statement can grant
// more than these fields show.
type iamPolicy struct {
	Version   string         `json:"Version"`
	Statement []iamStatement `json:"Statement"`
}

// iamStatement is one statement. Condition maps an operator (Null, Bool,
// StringLike, ...) to condition keys and their values.
type iamStatement struct {
	Sid       string                          `json:"Sid"`
	Effect    string                          `json:"Effect"`
	Action    iamValues                       `json:"Action"`
	Resource  iamValues                       `json:"Resource"`
	Condition map[string]map[string]iamValues `json:"Condition"`
}

// iamValues is a policy value: one string or a list of strings.
type iamValues []string

// UnmarshalJSON accepts a string or a list of strings.
func (v *iamValues) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*v = iamValues{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("want a string or a list of strings, got %s", b)
	}
	*v = many
	return nil
}

// readIAMPolicy reads examples/policies/<name>.json strictly: known fields
// only, one document, version 2012-10-17, each statement an Allow or Deny
// with actions and resources.
func readIAMPolicy(t *testing.T, name string) iamPolicy {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "policies", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var p iamPolicy
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("examples/policies/%s.json: %v", name, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("examples/policies/%s.json: data after the document (%v)", name, err)
	}
	if p.Version != "2012-10-17" || len(p.Statement) == 0 {
		t.Fatalf("examples/policies/%s.json: version %q, %d statements", name, p.Version, len(p.Statement))
	}
	for _, s := range p.Statement {
		if s.Effect != "Allow" && s.Effect != "Deny" || len(s.Action) == 0 || len(s.Resource) == 0 {
			t.Fatalf("examples/policies/%s.json: statement %q: effect %q, actions %v, resources %v", name, s.Sid, s.Effect, s.Action, s.Resource)
		}
	}
	return p
}

// grants reports whether s allows action (IAM wildcards * and ?, case
// insensitive).
func (s iamStatement) grants(action string) bool {
	if s.Effect != "Allow" {
		return false
	}
	for _, a := range s.Action {
		if ok, _ := path.Match(strings.ToLower(a), strings.ToLower(action)); ok {
			return true
		}
	}
	return false
}

// condition reports whether s's condition op on key is exactly value.
func (s iamStatement) condition(op, key, value string) bool {
	return slices.Equal(s.Condition[op][key], iamValues{value})
}

// createsWithoutIfNoneMatch returns the Sids of p's statements that allow
// s3:PutObject to create an object without an If-None-Match header. S3
// authorises PutObject, CopyObject and CompleteMultipartUpload (object
// creation) and CreateMultipartUpload, UploadPart and UploadPartCopy as
// s3:PutObject; a statement is create-only when it requires the header
// (Null s3:if-none-match false) or admits no object creation (Bool
// s3:ObjectCreationOperation false), as AWS's guide "Enforce conditional
// writes on Amazon S3 buckets" writes them.
func createsWithoutIfNoneMatch(p iamPolicy) []string {
	var out []string
	for _, s := range p.Statement {
		if s.grants("s3:PutObject") && !s.condition("Null", "s3:if-none-match", "false") && !s.condition("Bool", "s3:ObjectCreationOperation", "false") {
			out = append(out, s.Sid)
		}
	}
	return out
}

// grantPairs returns every "action resource" pair p allows, sorted.
func grantPairs(p iamPolicy) []string {
	var out []string
	for _, s := range p.Statement {
		for _, a := range s.Action {
			for _, r := range s.Resource {
				if s.Effect == "Allow" {
					out = append(out, a+" "+r)
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestAWSWorkerPolicy parses the example policies into typed statements
// and checks examples/policies/worker-aws.json: every statement that allows
// s3:PutObject requires the If-None-Match header (s3:if-none-match) or
// admits only the parts of a multipart upload, at least one statement of
// each kind exists, and the policy grants exactly the actions and
// resources of worker.json. The check finds worker.json's unconditioned
// s3:PutObject, and no PutObject at all in reader.json and gc.json.
func TestAWSWorkerPolicy(t *testing.T) {
	aws := readIAMPolicy(t, "worker-aws")
	if bad := createsWithoutIfNoneMatch(aws); len(bad) > 0 {
		t.Fatalf("worker-aws.json: statements %v allow s3:PutObject without s3:if-none-match", bad)
	}
	var ifNoneMatch, parts int
	for _, s := range aws.Statement {
		switch {
		case !s.grants("s3:PutObject"):
		case s.condition("Null", "s3:if-none-match", "false"):
			ifNoneMatch++
		case s.condition("Bool", "s3:ObjectCreationOperation", "false"):
			parts++
		}
	}
	if ifNoneMatch == 0 || parts == 0 {
		t.Fatalf("worker-aws.json: %d statement(s) allow PutObject with If-None-Match, %d the parts of an upload; want both", ifNoneMatch, parts)
	}

	minio := readIAMPolicy(t, "worker")
	if got, want := grantPairs(aws), grantPairs(minio); !slices.Equal(got, want) {
		t.Fatalf("worker-aws.json grants %v\nworker.json grants %v", got, want)
	}
	if bad := createsWithoutIfNoneMatch(minio); !slices.Contains(bad, "WriteAndReadTheDomainNoDelete") {
		t.Fatalf("the check does not find worker.json's unconditioned s3:PutObject: %v", bad)
	}
	for _, name := range []string{"reader", "gc"} {
		for _, s := range readIAMPolicy(t, name).Statement {
			if s.grants("s3:PutObject") {
				t.Fatalf("%s.json: statement %q allows s3:PutObject", name, s.Sid)
			}
		}
	}
}
