package config

import (
	"slices"
	"sort"
	"strings"

	"github.com/floodgate/floodgate/accesslog"
)

// choices are the words accepted by each field that takes one of a few, by
// field path ([] standing for any item of a list), in the order messages
// list them. Validation checks the fields against them, and the JSON
// Schema's enumerations are made from them.
var choices = map[string][]string{
	"server.path_matching":      {PathExact, PathCaseInsensitive},
	"server.format_suffix":      {FormatSuffixKeep, FormatSuffixIgnore},
	"server.escaped_slash":      {EscapedSlashBoth, EscapedSlashSegment, EscapedSlashDecoded, EscapedSlashReject},
	"server.method_override":    {MethodOverrideStrip, MethodOverrideReject, MethodOverrideHonor},
	"server.engine":             {EngineFast, EngineNetHTTP},
	"server.redis_eviction":     {RedisEvictionWarn, RedisEvictionRefuse},
	"server.memory.soft_limit":  {SoftLimitAuto, SoftLimitOff},
	"server.api_auth":           {APIAuthToken, APIAuthNone},
	"server.access_log.format":  {accesslog.FormatJSON.String(), accesslog.FormatCombined.String()},
	"server.user.jwt.alg":       {"HS256", "RS256", "ES256"},
	"routes[].on_invalid_token": {InvalidTokenReject, InvalidTokenAnonymous},
	"routes[].grpc_stream":      {GRPCStreamPerStream, GRPCStreamPerMessage},
	"routes[].balance":          {BalanceRoundRobin, BalanceLeastRequests},
	"server.tls.client_auth":    {ClientAuthNone, ClientAuthRequest, ClientAuthRequire},
	"server.tls.min_version":    {TLSVersion12, TLSVersion13},
	"limits[].scope":            {ScopeMethod, ScopeRoute, ScopeStage, ScopeGlobal},
	"server.bans[].key":         {BanKeyClientIP, BanKeyAPIKey, BanKeyUser},
	// A key part is one of these or KeyHeaderPrefix and a header name.
	"limits[].key": {KeyClientIP, KeyAPIKey, KeyPlan, KeyUser, KeyRoute, KeyStage, KeyGlobal},
}

// Choices returns the words the field at path accepts when it takes one of
// a few, such as Choices("server.engine") or Choices("limits[].scope"),
// where [] stands for any item of a list; nil for other fields. The values
// of a limit's parameters (algorithm, period, on_failure, consistency) are
// package floodgate's, and a limit's key part may also be
// KeyHeaderPrefix and a header name.
func Choices(path string) []string { return slices.Clone(choices[path]) }

// ChoicePaths returns the paths of the fields Choices knows, sorted.
func ChoicePaths() []string {
	out := make([]string, 0, len(choices))
	for p := range choices {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// wordList writes words as "a, b or c".
func wordList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
