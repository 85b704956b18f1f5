package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/floodgate/floodgate"
	"github.com/floodgate/floodgate/accesslog"
	"github.com/floodgate/floodgate/identity"
	"github.com/floodgate/floodgate/internal/yamlfile"
)

// Load reads, decodes and validates the file at path, for a command that
// runs once: a named pipe or standard input (/dev/stdin) is read as its
// writer sends it. On an invalid file the error is an Errors value holding
// every problem; a directory or socket at the path, or a file larger than
// MaxFileSize, is one, found without reading more than that. (A server's
// policy is read by policy.Reloader, which takes regular files only.)
func Load(path string) (*File, error) {
	data, err := yamlfile.ReadStream(path)
	var errs Errors
	if errors.As(err, &errs) {
		return nil, errs
	}
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parse(path, data, filepath.Dir(path))
}

// Parse decodes and validates data as the file name (used in messages).
// Relative paths in the file (JWT keys) are resolved against the directory
// of name.
func Parse(name string, data []byte) (*File, error) {
	return parse(name, data, filepath.Dir(name))
}

// hooks decode the types with a YAML shape of their own.
var hooks = map[reflect.Type]yamlfile.Hook{
	reflect.TypeOf(Delay{}): func(d *yamlfile.Decoder, n *yaml.Node, v reflect.Value, path string) {
		v.Addr().Interface().(*Delay).decode(d, n, path)
	},
	reflect.TypeOf(KeySpec{}): func(d *yamlfile.Decoder, n *yaml.Node, v reflect.Value, path string) {
		v.Addr().Interface().(*KeySpec).decode(d, n, path)
	},
}

func parse(name string, data []byte, dir string) (*File, error) {
	root, errs := yamlfile.Read(name, data)
	if errs != nil {
		return nil, errs
	}
	f := &File{Path: name}
	setDefaults(f)
	d := yamlfile.NewDecoder(name, hooks)
	d.Decode(root, reflect.ValueOf(f).Elem(), "")
	if d.TooLarge() {
		return nil, d.Err()
	}
	f.pos = d.Positions()
	v := &validator{f: f, dir: dir, d: d}
	v.validate()
	if err := d.Err(); err != nil {
		return nil, err
	}
	return f, nil
}

// Defaults of the server section that belong to the file itself. The
// others are those of the packages that implement them:
// floodgate.DefaultStoreTimeout, floodgate.DefaultUpstreamTimeout (and its
// dial and idle companions), identity.DefaultIPv6Prefix,
// identity.DefaultAPIKeyHeader and, for server.user.jwt,
// identity.DefaultJWTHeader, identity.DefaultJWTClaim and
// identity.DefaultLeeway, and for server.access_log accesslog.DefaultMaxSize
// and accesslog.DefaultMaxFiles.
const (
	DefaultListen      = ":8080"
	DefaultAdminListen = "127.0.0.1:9090"
	DefaultOpsListen   = "127.0.0.1:9102"
	DefaultStore       = "memory"

	// DefaultReadHeaderTimeout, DefaultReadTimeout and DefaultIdleTimeout
	// bound the gateway's client connections (server.timeouts).
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 60 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	// DefaultSendTimeout bounds one write of an answer to a client
	// (server.timeouts.send).
	DefaultSendTimeout = floodgate.DefaultSendTimeout
	// DefaultMemoryMaxBytes caps the embedded store (server.memory).
	DefaultMemoryMaxBytes = 256 << 20
	// DefaultAdminMaxKeys bounds the admin API's keys (server.admin.max_keys).
	DefaultAdminMaxKeys = 100000
)

// Values of server.path_matching, server.format_suffix, server.escaped_slash,
// server.method_override, server.engine, server.api_auth,
// routes[].on_invalid_token, routes[].grpc_stream, server.redis_eviction and
// server.memory.soft_limit.
const (
	EngineFast    = "fast"
	EngineNetHTTP = "net/http"

	PathExact           = "exact"
	PathCaseInsensitive = "case_insensitive"

	FormatSuffixKeep   = "keep"
	FormatSuffixIgnore = "ignore"

	EscapedSlashBoth    = "both"
	EscapedSlashSegment = "segment"
	EscapedSlashDecoded = "decoded"
	EscapedSlashReject  = "reject"

	MethodOverrideStrip  = "strip"
	MethodOverrideReject = "reject"
	MethodOverrideHonor  = "honor"

	APIAuthToken = "token"
	APIAuthNone  = "none"

	InvalidTokenReject    = "reject"
	InvalidTokenAnonymous = "anonymous"

	GRPCStreamPerStream  = "per_stream"
	GRPCStreamPerMessage = "per_message"

	RedisEvictionWarn   = "warn"
	RedisEvictionRefuse = "refuse"

	SoftLimitAuto = "auto"
	SoftLimitOff  = "off"
)

func setDefaults(f *File) {
	f.Version = 1
	f.Server = Server{
		Listen:           DefaultListen,
		AdminListen:      DefaultAdminListen,
		OpsListen:        DefaultOpsListen,
		Store:            DefaultStore,
		StoreTimeout:     floodgate.DefaultStoreTimeout,
		StoreHardTimeout: floodgate.DefaultStoreHardTimeout,
		Instances:        1,
		Headers:          Headers{RateLimit: true},
		IPv6Prefix:       identity.DefaultIPv6Prefix,
		ForwardedHeader:  identity.HeaderXForwardedFor,
		APIKeyHeader:     identity.DefaultAPIKeyHeader,
		Upstream: Upstream{
			Timeout:      floodgate.DefaultUpstreamTimeout,
			DialTimeout:  floodgate.DefaultUpstreamDialTimeout,
			IdleTimeout:  floodgate.DefaultUpstreamIdleTimeout,
			DrainTimeout: floodgate.DefaultDrainTimeout,
			DrainBytes:   floodgate.DefaultDrainBytes,
		},
		PathMatching:   PathExact,
		FormatSuffix:   FormatSuffixKeep,
		EscapedSlash:   EscapedSlashBoth,
		MethodOverride: MethodOverrideStrip,
		Engine:         EngineFast,
		Timeouts: Timeouts{
			ReadHeader: DefaultReadHeaderTimeout,
			Read:       DefaultReadTimeout,
			Idle:       DefaultIdleTimeout,
			Send:       DefaultSendTimeout,
		},
		Memory:        Memory{MaxBytes: DefaultMemoryMaxBytes, MaxKeyBytes: floodgate.DefaultMaxKeyBytes, SoftLimit: SoftLimitAuto},
		APIAuth:       APIAuthToken,
		Admin:         Admin{MaxKeys: DefaultAdminMaxKeys},
		RedisEviction: RedisEvictionWarn,
		AccessLog:     AccessLog{Format: accesslog.FormatJSON.String(), MaxSize: accesslog.DefaultMaxSize, MaxFiles: accesslog.DefaultMaxFiles},
	}
}

func reflectValue(p any) reflect.Value { return reflect.ValueOf(p).Elem() }
