package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// logKey is the context key of the command's log settings (Logger).
type logKey struct{}

// addLogFlags registers --log-format and --log-level on root's persistent
// flags, as the overrides of log.format and log.level.
func addLogFlags(root *cobra.Command) {
	f := root.PersistentFlags()
	f.String("log-format", config.DefaultLog.Format, "stderr log format: text or json (log.format)")
	f.String("log-level", config.DefaultLog.Level, "least severe message logged: debug, info, warn or error (log.level)")
	KeyFlag(f, "log-format", "log.format")
	KeyFlag(f, "log-level", "log.level")
	_ = root.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions([]string{config.LogText, config.LogJSON}, cobra.ShellCompDirectiveNoFileComp))
	_ = root.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions([]string{"debug", "info", "warn", "error"}, cobra.ShellCompDirectiveNoFileComp))
}

// setLogger is root's PersistentPreRunE: it reads log.format and log.level
// of the command about to run (flag > env > file > default) and puts them
// in the command's context for Logger, then warns about each deprecated
// flag the command line used (Deprecate). A config file that does not parse is
// left for the command to report, and the settings come from the flags and
// the environment. Errors: exit 2 for a bad log.format or log.level.
func setLogger(c *cobra.Command, _ []string) error {
	v, _, err := loadViperFile(c)
	if err != nil {
		v = config.NewViper()
		bindLogFlags(v, c.Flags())
	}
	lc := logOf(v)
	if err := lc.Validate(); err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	c.SetContext(context.WithValue(c.Context(), logKey{}, lc))
	warnDeprecated(c)
	return nil
}

// logOf returns v's log settings, unvalidated.
func logOf(v *viper.Viper) config.Log {
	return config.Log{Format: v.GetString("log.format"), Level: v.GetString("log.level")}
}

// bindLogFlags binds the log flags of fs to v.
func bindLogFlags(v *viper.Viper, fs *pflag.FlagSet) {
	for _, name := range []string{"log-format", "log-level"} {
		if fl := fs.Lookup(name); fl != nil {
			_ = v.BindPFlag(fl.Annotations[configKeyAnnotation][0], fl) // addLogFlags annotates both
		}
	}
}

// logWrites serializes the records of every logger newLogger makes: a
// command makes several on the same stderr (its own, a session's, a
// child's relay), and each record must reach the stream whole and alone.
var logWrites sync.Mutex

// serialWriter writes through w under logWrites.
type serialWriter struct{ w io.Writer }

func (s serialWriter) Write(p []byte) (int, error) {
	logWrites.Lock()
	defer logWrites.Unlock()
	return s.w.Write(p)
}

// newLogger returns the logger on w of validated settings lc. Loggers on
// the same w may be used concurrently.
func newLogger(w io.Writer, lc config.Log) *slog.Logger {
	lv, _ := lc.SlogLevel() // validated
	w = serialWriter{w}
	if lc.Format == config.LogJSON {
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv}))
	}
	return slog.New(newTextHandler(w, lv))
}

// logSettings returns the log settings of the running command c, and
// whether setLogger found them.
func logSettings(c *cobra.Command) (config.Log, bool) {
	if c.Context() != nil {
		if lc, ok := c.Context().Value(logKey{}).(config.Log); ok {
			return lc, true
		}
	}
	return config.DefaultLog, false
}

// Logger returns the logger on c's stderr of the running command c
// (log.format, log.level; docs/cli.md "Logs"). Outside a command run by a tree
// that Prepare set up, it is a text logger at info level.
func Logger(c *cobra.Command) *slog.Logger { return LoggerTo(c, c.ErrOrStderr()) }

// LoggerTo is Logger writing to w instead of c's stderr, for a command
// that shares its stderr with a child process (w serializes the writes).
func LoggerTo(c *cobra.Command, w io.Writer) *slog.Logger {
	lc, _ := logSettings(c)
	return newLogger(w, lc)
}

// LogsJSON reports whether c logs JSON lines (log.format json), in which
// case nothing but log records may be written to its stderr.
func LogsJSON(c *cobra.Command) bool {
	lc, _ := logSettings(c)
	return lc.Format == config.LogJSON
}

// errorLogger is the logger for the error a run of c ended with: c's own,
// or, when its flags did not parse (setLogger never ran, c may be nil),
// the one of log.format and log.level from args (what follows the
// executable; other flags are skipped), the environment and the config
// file, a bad value of either falling back to its default (text, info).
func errorLogger(c *cobra.Command, w io.Writer, args []string) *slog.Logger {
	if c != nil {
		if lc, ok := logSettings(c); ok {
			return newLogger(w, lc)
		}
	}
	fs := pflag.NewFlagSet("log", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.SetOutput(io.Discard)
	path := fs.String("config", "", "")
	fs.String("log-format", config.DefaultLog.Format, "")
	fs.String("log-level", config.DefaultLog.Level, "")
	KeyFlag(fs, "log-format", "log.format")
	KeyFlag(fs, "log-level", "log.level")
	_ = fs.Parse(args) // unparsable values keep the defaults
	v := config.NewViper()
	_, _ = config.ReadFile(v, *path) // a bad file keeps env and flags
	bindLogFlags(v, fs)
	lc := logOf(v)
	if lc.Format != config.LogJSON {
		lc.Format = config.LogText
	}
	if _, err := lc.SlogLevel(); err != nil {
		lc.Level = config.DefaultLog.Level
	}
	return newLogger(w, lc)
}

// textHandler writes one line per record: "fencepub: ", "warning: " or
// "debug: " for those levels, the message and the attributes as key=value
// (quoted when needed), the form fencepub's messages had before they went
// through slog.
type textHandler struct {
	w     io.Writer
	level slog.Leveler
	attrs string // preformatted " k=v" of WithAttrs
	group string // "g." prefix of WithGroup
}

func newTextHandler(w io.Writer, level slog.Leveler) *textHandler {
	return &textHandler{w: w, level: level}
}

func (h *textHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level.Level() }

func (h *textHandler) Handle(_ context.Context, r slog.Record) error {
	var b bytes.Buffer
	b.WriteString("fencepub: ")
	switch {
	case r.Level == slog.LevelWarn:
		b.WriteString("warning: ")
	case r.Level < slog.LevelInfo:
		b.WriteString("debug: ")
	}
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		appendAttr(&b, h.group, a)
		return true
	})
	b.WriteByte('\n')
	_, err := h.w.Write(b.Bytes()) // one Write: newLogger's w serializes them
	return err
}

func (h *textHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var b bytes.Buffer
	for _, a := range as {
		appendAttr(&b, h.group, a)
	}
	n := *h
	n.attrs += b.String()
	return &n
}

func (h *textHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	n.group += name + "."
	return &n
}

// appendAttr writes " group.key=value", groups flattened, empty attributes
// dropped.
func appendAttr(b *bytes.Buffer, group string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		g := group
		if a.Key != "" {
			g += a.Key + "."
		}
		for _, ga := range a.Value.Group() {
			appendAttr(b, g, ga)
		}
		return
	}
	b.WriteByte(' ')
	b.WriteString(group + a.Key + "=")
	s := a.Value.String()
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r == '"' || r == '=' || !unicode.IsPrint(r) }) >= 0 {
		s = strconv.Quote(s)
	}
	b.WriteString(s)
}
