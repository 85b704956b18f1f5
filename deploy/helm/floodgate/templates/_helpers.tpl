{{/* The chart's name, at most 63 characters. */}}
{{- define "floodgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The name of the release's objects: the release's name, with the chart's unless it holds it. */}}
{{- define "floodgate.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "floodgate.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "floodgate.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "floodgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "floodgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "floodgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "floodgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: {{ .Values.mode }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "floodgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "floodgate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* serve: floodgate serve runs the pods (gateway and decision modes). */}}
{{- define "floodgate.serve" -}}
{{- if or (eq .Values.mode "gateway") (eq .Values.mode "decision") -}}true{{- end -}}
{{- end -}}

{{/* The port of opsListen (host:port). */}}
{{- define "floodgate.opsPort" -}}
{{- splitList ":" .Values.opsListen | last -}}
{{- end -}}

{{/* The Secret holding the store URL: the one given, or the chart's. */}}
{{- define "floodgate.storeSecret" -}}
{{- default (printf "%s-store" (include "floodgate.fullname" .)) .Values.store.redis.existingSecret -}}
{{- end -}}

{{/* tokenList is the policy's list of tokens ({name, sha256}) of a token setting (admin, checkAPI). */}}
{{- define "floodgate.tokenList" -}}
{{- $out := list -}}
{{- range $name, $token := .tokens -}}
{{- $out = append $out (dict "name" $name "sha256" (sha256sum $token)) -}}
{{- end -}}
{{- range .tokenHashes -}}
{{- $out = append $out (dict "name" .name "sha256" .sha256) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* server is the policy's server section: the values' with the chart's listeners and tokens. */}}
{{- define "floodgate.server" -}}
{{- $srv := deepCopy (default (dict) .Values.policy.server) -}}
{{- if eq .Values.mode "decision" -}}
{{- $_ := set $srv "listen" "127.0.0.1:8080" -}}
{{- $_ := set $srv "grpc_listen" ":8081" -}}
{{- $_ := set $srv "api_listen" ":8082" -}}
{{- $_ := set $srv "rls_config" (list "../descriptors") -}}
{{- $api := include "floodgate.tokenList" .Values.checkAPI | fromJsonArray -}}
{{- if $api -}}
{{- $_ := set $srv "api_tokens" $api -}}
{{- else if ne (default "token" $srv.api_auth) "none" -}}
{{- fail "mode decision: the check API needs checkAPI.tokens or checkAPI.tokenHashes (or policy.server.api_auth: none)" -}}
{{- end -}}
{{- else -}}
{{- $_ := set $srv "listen" ":8080" -}}
{{- end -}}
{{- $_ := set $srv "admin_listen" .Values.adminListen -}}
{{- $_ := set $srv "ops_listen" .Values.opsListen -}}
{{- $admin := deepCopy (default (dict) $srv.admin) -}}
{{- $_ := set $admin "keys_file" "/var/lib/floodgate/keys.json" -}}
{{- $tokens := include "floodgate.tokenList" .Values.admin | fromJsonArray -}}
{{- if $tokens -}}
{{- $_ := set $admin "tokens" $tokens -}}
{{- end -}}
{{- $_ := set $srv "admin" $admin -}}
{{- /* instances divides a limit whose on_failure is local while Redis is down: it counts every pod that may run (with an HPA, its maximum, and a rolling update's surge above it), so that the pods together never admit more than the limit. */ -}}
{{- if and (eq .Values.store.type "redis") (not (hasKey $srv "instances")) -}}
{{- $replicas := int (ternary .Values.autoscaling.maxReplicas .Values.replicaCount .Values.autoscaling.enabled) -}}
{{- $_ := set $srv "instances" (add $replicas (include "floodgate.surge" (dict "strategy" .Values.updateStrategy "replicas" $replicas) | int)) -}}
{{- end -}}
{{- toYaml $srv -}}
{{- end -}}

{{/* policy is the whole policy file. */}}
{{- define "floodgate.policy" -}}
{{- $p := omit .Values.policy "server" -}}
{{- $_ := set $p "server" (include "floodgate.server" . | fromYaml) -}}
{{- toYaml $p -}}
{{- end -}}

{{/* restartSettings are the settings of the server section that floodgate serve applies only at start (the others are reloaded with the file). */}}
{{- define "floodgate.restartSettings" -}}
{{- $srv := include "floodgate.server" . | fromYaml -}}
{{- $out := pick $srv "listen" "admin_listen" "ops_listen" "ops_hosts" "grpc_listen" "api_listen" "rls_config" "store" "state_file" "store_timeout" "store_hard_timeout" "instances" "upstream" "timeouts" "max_connections" "memory" "method_override" "engine" "tls" "grpc_tls_cert" "grpc_tls_key" "grpc_tls_client_ca" "grpc_tls_client_san" "api_tls_cert" "api_tls_key" "api_tls_client_ca" "api_tls_client_san" "api_auth" "access_log" "redis_eviction" -}}
{{- /* The admin listener's host names, TLS files and keys file are read at start too; its tokens are reloaded. */ -}}
{{- $_ := set $out "admin" (pick (default (dict) $srv.admin) "hosts" "tls_cert" "tls_key" "tls_client_ca" "tls_client_san" "keys_file") -}}
{{- toYaml $out -}}
{{- end -}}

{{/* bytes is a memory quantity of Kubernetes (536870912, 512Mi, 1G) in bytes, or "" when it is not one these spell. */}}
{{- define "floodgate.bytes" -}}
{{- if or (kindIs "float64" .) (kindIs "int" .) (kindIs "int64" .) -}}
{{- int64 . -}}
{{- else -}}
{{- $q := toString . -}}
{{- $num := regexFind "^[0-9]+" $q -}}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- $unit := trimPrefix $num $q -}}
{{- if and $num (hasKey $units $unit) -}}
{{- mul (int64 $num) (get $units $unit) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* memoryFits fails when the soft memory limit floodgate serve sets (server.memory.soft_limit: auto), 1.1 times server.memory.max_bytes and at least 8 MiB for the rest of the process, does not fit within nine tenths of the container's memory limit, which serve keeps it under (and warns at start when the store does not fit there). */}}
{{- define "floodgate.memoryFits" -}}
{{- $limit := dig "limits" "memory" "" (default (dict) .Values.resources) -}}
{{- $srv := default (dict) .Values.policy.server -}}
{{- $mem := default (dict) $srv.memory -}}
{{- if and $limit (ne (toString (default "auto" $mem.soft_limit)) "off") (not (hasKey (default (dict) .Values.env) "GOMEMLIMIT")) -}}
{{- $cap := int64 (default 268435456 $mem.max_bytes) -}}
{{- $soft := add $cap (div $cap 10) 8388608 -}}
{{- $bytes := include "floodgate.bytes" $limit -}}
{{- if $bytes -}}
{{- $ceiling := int64 (mulf (int64 $bytes) 0.9) -}}
{{- if lt $ceiling $soft -}}
{{- fail (printf "resources.limits.memory (%d bytes) is too small for policy.server.memory.max_bytes %d: floodgate serve keeps its soft memory limit within nine tenths of the container's (%d bytes), below what the store needs (%d bytes: the cap, a tenth of it and 8 MiB for the rest of the process), so the collector would run all the time and the kernel kill the process when the store fills. Raise the limit to at least %d bytes or lower max_bytes" (int64 $bytes) $cap $ceiling $soft (int64 (ceil (divf $soft 0.9)))) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* surge is how many pods a rolling update runs beyond replicas: maxSurge as a number, or as a percentage of replicas rounded up (as Kubernetes rounds it); 0 for Recreate. */}}
{{- define "floodgate.surge" -}}
{{- $st := default (dict) .strategy -}}
{{- if eq (default "RollingUpdate" $st.type) "Recreate" -}}
0
{{- else -}}
{{- $s := dig "rollingUpdate" "maxSurge" "25%" $st -}}
{{- if kindIs "string" $s -}}
{{- $pct := int (trimSuffix "%" $s) -}}
{{- div (add (mul .replicas $pct) 99) 100 -}}
{{- else -}}
{{- int $s -}}
{{- end -}}
{{- end -}}
{{- end -}}
