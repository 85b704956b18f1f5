package app

import (
	"errors"
	"fmt"
	"os"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/yamlfile"
	"github.com/floodgate/floodgate/rls"
)

// CheckRLSConfig reads the descriptor files a policy's server.rls_config
// names, as serve reads them when it starts (the paths relative to the
// policy file at cfgPath), and returns every problem that would stop it:
// a path that cannot be read is placed at its entry of the policy, a
// descriptor file's problems at their own positions. A policy without
// rls_config has none.
func CheckRLSConfig(cfgPath string, f *config.File) error {
	set := policySettings(cfgPath, &f.Server, false)
	if set.RLS == nil || len(set.RLS.Paths) == 0 {
		return nil
	}
	var errs yamlfile.Errors
	var readable []string
	for i, p := range set.RLS.Paths {
		if _, err := os.Stat(p); err != nil {
			field := fmt.Sprintf("server.rls_config[%d]", i)
			pos := f.Position(field)
			errs = append(errs, &yamlfile.Error{File: cfgPath, Line: pos.Line, Column: pos.Column, Field: field,
				Msg: fmt.Sprintf("%s: cannot read: %v", p, errors.Unwrap(err))})
			continue
		}
		readable = append(readable, p)
	}
	if len(readable) > 0 {
		if _, err := rls.Load(readable, set.RLS.Load); err != nil {
			var found yamlfile.Errors
			if !errors.As(err, &found) {
				if len(errs) == 0 {
					return err
				}
				return errors.Join(errs.Sorted(), err)
			}
			errs = append(errs, found...)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs.Sorted()
}
