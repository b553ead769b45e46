package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// SchemaVersion is the schema_version of every JSON document the CLI
// prints: raised when a field changes meaning or type or goes away (adding
// a field does not raise it). docs/cli.md "JSON output".
const SchemaVersion = 1

// WriteJSON writes v, which must encode as a JSON object, as one JSON
// document and a newline, with "schema_version" first; indented by indent,
// or on one line when indent is "" (the form of a stream such as `watch`).
func WriteJSON(w io.Writer, v any, indent string) error {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	b := bytes.TrimSpace(body.Bytes())
	if len(b) < 2 || b[0] != '{' {
		return fmt.Errorf("json output: %T is not an object", v)
	}
	doc := fmt.Appendf(nil, `{"schema_version":%d`, SchemaVersion)
	if len(b) > 2 {
		doc = append(doc, ',')
	}
	doc = append(doc, b[1:]...)
	var out bytes.Buffer
	if indent == "" {
		out.Write(doc)
	} else if err := json.Indent(&out, doc, "", indent); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

// ErrorOutput is the JSON document a command run with -o json prints on
// stdout when it fails before printing its own (docs/cli.md "JSON output"):
// the command, the error and the process exit code. A publish or run that
// got as far as an outcome prints its result document instead, which
// carries "error" and "exit_code" too.
type ErrorOutput struct {
	Command  string `json:"command,omitempty"` // e.g. "fencepub publish"; empty when the command line named none
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
}

// Execute runs root with ctx and args (what follows the executable) and
// returns the command that ran (nil when none was found), the process exit
// code (ExitCode) and the command's error. When the command fails, was asked for
// JSON (-o json, --output json) and wrote nothing to stdout, it prints an
// ErrorOutput there, so a script that saves the JSON always gets a
// document. Main runs it; tests run it in-process.
func Execute(ctx context.Context, root *cobra.Command, args []string) (*cobra.Command, int, error) {
	out := &countingWriter{w: root.OutOrStdout()}
	root.SetOut(out)
	root.SetArgs(args)
	c, err := root.ExecuteContextC(ctx)
	code := ExitCode(err, ctx.Err() != nil)
	if err != nil && out.n == 0 && wantsJSON(c, args) {
		doc := ErrorOutput{Error: Message(err), ExitCode: code}
		if c != nil && c != root {
			doc.Command = c.CommandPath()
		}
		_ = WriteJSON(out, doc, "  ") // stdout gone: the error is on stderr too
	}
	return c, code, err
}

// Message is err's text as the CLI reports it: without a leading
// "fencepub: " (an error of the core package), which the text log
// handler already prints before every message.
func Message(err error) string { return strings.TrimPrefix(err.Error(), "fencepub: ") }

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// File returns the file w writes to: w itself when it is an *os.File, or
// the file under the stdout Execute wraps to count its bytes; ok is false
// for any other writer. Checks of whether a command's stdout is a terminal
// go through it, so the wrapping does not hide the terminal.
func File(w io.Writer) (f *os.File, ok bool) {
	if c, wrapped := w.(*countingWriter); wrapped {
		w = c.w
	}
	f, ok = w.(*os.File)
	return f, ok
}

// wantsJSON reports whether the run of c asked for JSON output: c's
// -o/--output flag says json (also when a former spelling sharing its value
// set it), or, when c's flags did not parse that far (c may be nil), args
// hold -o json, --output json or --output=json before a "--".
func wantsJSON(c *cobra.Command, args []string) bool {
	if c != nil {
		if fl := c.Flags().Lookup(OutputFlag); fl != nil && fl.Value.String() == "json" {
			return true
		}
	}
	fs := pflag.NewFlagSet("output", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.SetOutput(io.Discard)
	o := fs.StringP(OutputFlag, "o", "", "")
	_ = fs.Parse(args) // unparsable values leave it empty
	return *o == "json"
}

// OutputFlag is the name of every command's output-format flag,
// -o/--output text|json.
const OutputFlag = "output"
