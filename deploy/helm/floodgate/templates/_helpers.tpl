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
{{- if and (eq .Values.store.type "redis") (not (hasKey $srv "instances")) -}}
{{- $_ := set $srv "instances" (ternary .Values.autoscaling.minReplicas .Values.replicaCount .Values.autoscaling.enabled) -}}
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
{{- toYaml (pick $srv "listen" "admin_listen" "ops_listen" "grpc_listen" "api_listen" "rls_config" "store" "state_file" "store_timeout" "store_hard_timeout" "instances" "upstream" "timeouts" "max_connections" "memory" "method_override" "engine") -}}
{{- end -}}
