// Package cli holds what the subcommands of the floodgate binary share:
// usage errors (exit status 2), errors that carry their own exit status,
// and the parsing of a command's flags. The commands live in packages of
// their own (the simulator, the load generators) and in cmd/floodgate;
// each is a function run(ctx, args, stdout, stderr) error.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/floodgate/floodgate"
)

// UsageError marks an error caused by bad arguments: exit status 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usagef returns a UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// ExitError carries an exit status other than 0, 1 or 2 semantics set by
// a command (floodgate check exits 1 on an invalid file).
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// ExitCode maps an error of a command to the process exit status: 0, 2
// for a UsageError, an ExitError's code, else 1.
func ExitCode(err error) int {
	var ue *UsageError
	var ee *ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return 2
	case errors.As(err, &ee):
		return ee.Code
	}
	return 1
}

// ParseFlags parses a command's flags. A bad flag is returned, not
// printed, so that the binary prints it once; -h prints usage and the
// flags to stdout and returns help = true.
func ParseFlags(fs *flag.FlagSet, args []string, stdout io.Writer, usage string) (help bool, err error) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return true, nil
		}
		return false, Usagef("%s: %v (run 'floodgate %s -h')", fs.Name(), err, fs.Name())
	}
	return false, nil
}

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// limitParams names the limit parameter each limit flag of simulate and
// bench sets.
var limitParams = map[string]floodgate.Param{
	"rate": floodgate.ParamRate, "per": floodgate.ParamPer, "burst": floodgate.ParamBurst,
	"delay": floodgate.ParamDelay, "nodelay": floodgate.ParamDelay, "limit": floodgate.ParamMax,
	"window": floodgate.ParamWindow, "lease-ttl": floodgate.ParamLeaseTTL, "period": floodgate.ParamPeriod,
	"time-zone": floodgate.ParamTimeZone, "anchor-day": floodgate.ParamAnchorDay, "offset": floodgate.ParamOffset,
}

// LimitParam returns the limit parameter a limit flag (--rate, --burst
// ...) sets, and whether the flag is one.
func LimitParam(flagName string) (floodgate.Param, bool) {
	p, ok := limitParams[flagName]
	return p, ok
}
