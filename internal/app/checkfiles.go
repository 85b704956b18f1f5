package app

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/floodgate/floodgate/config"
	"github.com/floodgate/floodgate/internal/console"
	"github.com/floodgate/floodgate/keystore"
)

// CheckFiles returns every problem with the files of the policy f, read
// from cfgPath, that floodgate serve would refuse to start with, or would
// start without and lose what they are for: the files it reads (the
// certificates of the rate-limit service, the check API and the admin
// listener, the secrets of the plans' alarm webhooks) and, with places,
// where it keeps files on this machine (the access log,
// server.access_log.path; the memory store's state file and the file of
// the keys made through the admin API, server.state_file and
// server.admin.keys_file). The places depend on the machine: a policy
// checked where serve does not run (in CI, before it is deployed) names
// directories that exist only where it runs. serve runs every check when
// it starts, before it opens anything. Each problem is a config.Error
// placed at its field of the policy; relative paths are relative to the
// policy file. Nothing is created or changed, and nothing is opened in a
// way that waits: a file serve creates is judged by its directory
// (config.CheckLogFile, config.CheckStateFile).
func CheckFiles(cfgPath string, f *config.File, places bool) error {
	return checkFiles(f, &f.Server, &ServeOptions{Config: cfgPath}, places)
}

// checkFiles is CheckFiles for serve's settings: srv is the server section
// serve runs with (the store of --store-file in place of the file's), and
// o the flags that replace settings of the file (--access-log,
// --admin-listen). A problem of a flag's path is named after the flag.
func checkFiles(f *config.File, srv *config.Server, o *ServeOptions, places bool) error {
	cfgPath := o.Config
	var errs config.Errors
	problem := func(field string, err error) {
		pos := f.Position(field)
		errs = append(errs, &config.Error{File: cfgPath, Line: pos.Line, Column: pos.Column, Field: field, Msg: err.Error()})
	}
	var flagErr error
	al, on, err := accessLogOptions(srv.AccessLog, o)
	if err != nil {
		return err
	}
	if places && on && al.Path != "" {
		if err := config.CheckLogFile(al.Path); err != nil {
			if o.AccessLog != "" {
				flagErr = fmt.Errorf("--access-log: %w", err)
			} else {
				problem("server.access_log.path", err)
			}
		}
	}
	if places && srv.StoreKind() == "memory" {
		state := console.StateFile(cfgPath, srv)
		var stateErr error
		if state != "" {
			if stateErr = config.CheckStateFile(state); stateErr != nil {
				problem("server.state_file", stateErr)
			}
		}
		// Without keys_file the keys file is beside the state file: its
		// directory's problem is the state file's, said once.
		if srv.Admin.KeysFile != "" || stateErr == nil {
			if err := loadKeysFile(console.KeysFile(cfgPath, state, srv)); err != nil {
				problem("server.admin.keys_file", err)
			}
		}
	}
	var grpc TLS
	if set := policySettings(cfgPath, srv, false); set.RLS != nil {
		grpc = set.RLS.TLS
	}
	admin := firstNonEmpty(o.AdminListen, srv.AdminListen)
	for _, l := range []struct {
		prefix string
		on     bool
		t      TLS
	}{
		{"server.grpc_tls_", srv.GRPCListen != "", grpc},
		{"server.api_tls_", srv.APIListen != "", apiTLS(cfgPath, srv)},
		{"server.admin.tls_", admin != "" && admin != "off", adminListenerTLS(cfgPath, &srv.Admin)},
	} {
		if !l.on || l.t.Cert == "" || l.t.Key == "" {
			continue
		}
		// The pair first, then the client CA with it, as serve loads
		// them, so that each problem is placed at its own field.
		pair := l.t
		pair.ClientCA, pair.ClientSAN = "", ""
		if _, err := pair.config(); err != nil {
			problem(l.prefix+"cert", err)
		} else if l.t.ClientCA != "" {
			if _, err := l.t.config(); err != nil {
				problem(l.prefix+"client_ca", err)
			}
		}
	}
	for i := range f.Plans {
		a := f.Plans[i].Alarms
		if a == nil || a.Webhook == "" || a.SecretPath == "" {
			continue
		}
		if _, err := config.ReadSecret(a.SecretPath); err != nil {
			problem(fmt.Sprintf("plans[%d].alarms.secret_file", i), err)
		}
	}
	if len(errs) == 0 {
		return flagErr
	}
	if flagErr != nil {
		return errors.Join(flagErr, errs.Sorted())
	}
	return errs.Sorted()
}

// loadKeysFile loads the keys made through the admin API from the file at
// path with the function serve's console loads them with when it starts
// (a missing file holds none; anything but a regular file is refused
// without waiting), and reports why it could not.
func loadKeysFile(path string) error {
	if _, _, err := keystore.NewFileBackend(path).Load(context.Background()); err != nil {
		return fmt.Errorf("cannot load the keys made through the admin API: %s", strings.TrimPrefix(err.Error(), "keystore: "))
	}
	return nil
}
