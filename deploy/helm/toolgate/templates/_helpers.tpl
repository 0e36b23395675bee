{{/* The chart's name. */}}
{{- define "toolgate.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's objects' name: the release name, with the chart's unless it holds it. */}}
{{- define "toolgate.fullname" -}}
{{- if contains .Chart.Name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{- define "toolgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "toolgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "toolgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "toolgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "toolgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "toolgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "toolgate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
toolgate.files resolves `files`: a JSON list of {flag, kind, name, key, path}
for every file-valued flag that is set, in flag order. Content given in the
values lives in the chart's own ConfigMap (registry, policy, quota-rules) or Secret.
*/}}
{{- define "toolgate.files" -}}
{{- $out := list }}
{{- range $flag, $f := .Values.files }}
{{- if $f }}
{{- $e := dict "flag" $flag }}
{{- if hasKey $f "content" }}
{{- $_ := set $e "kind" (ternary "configMap" "secret" (has $flag (list "registry" "policy" "quota-rules"))) }}
{{- $_ := set $e "name" (printf "%s-files" (include "toolgate.fullname" $)) }}
{{- $_ := set $e "key" $flag }}
{{- else if $f.secretName }}
{{- $_ := set $e "kind" "secret" }}
{{- $_ := set $e "name" $f.secretName }}
{{- $_ := set $e "key" (default $flag $f.key) }}
{{- else if $f.configMapName }}
{{- $_ := set $e "kind" "configMap" }}
{{- $_ := set $e "name" $f.configMapName }}
{{- $_ := set $e "key" (default $flag $f.key) }}
{{- else }}
{{- fail (printf "files.%s: give secretName, configMapName or content" $flag) }}
{{- end }}
{{- $_ := set $e "path" (printf "/etc/toolgate/%s/%s" $flag $e.key) }}
{{- $out = append $out $e }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/* toolgate.contents: the files given as content, {flag: content}, for the ConfigMap (kind "configMap") or Secret ("secret"). */}}
{{- define "toolgate.contents" -}}
{{- $out := dict }}
{{- range $flag, $f := .root.Values.files }}
{{- if and $f (hasKey $f "content") (eq $.kind (ternary "configMap" "secret" (has $flag (list "registry" "policy" "quota-rules")))) }}
{{- $_ := set $out $flag $f.content }}
{{- end }}
{{- end }}
{{- toJson $out }}
{{- end }}

{{/* toolgate.flagValue prints a config value as the gateway parses it: whole numbers without an exponent. */}}
{{- define "toolgate.flagValue" -}}
{{- if and (kindIs "float64" .) (eq (floor .) .) }}
{{- int64 . }}
{{- else }}
{{- . }}
{{- end }}
{{- end }}

{{/* toolgate.shutdownGraceSeconds: config.shutdown-grace in seconds. */}}
{{- define "toolgate.shutdownGraceSeconds" -}}
{{- $g := required "config.shutdown-grace is needed: terminationGracePeriodSeconds is set above it" (index .Values.config "shutdown-grace") }}
{{- $n := int64 (regexReplaceAll "[smh]$" $g "") }}
{{- if hasSuffix "h" $g }}{{ mul $n 3600 }}{{ else if hasSuffix "m" $g }}{{ mul $n 60 }}{{ else }}{{ $n }}{{ end }}
{{- end }}
