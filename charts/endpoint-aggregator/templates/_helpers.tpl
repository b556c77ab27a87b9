{{/*
Chart name, truncated to a DNS label.
*/}}
{{- define "endpoint-aggregator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: the release name, prefixed with the chart name unless it already
contains it. Truncated to 63 characters (DNS label).
*/}}
{{- define "endpoint-aggregator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart label value: name-version.
*/}}
{{- define "endpoint-aggregator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "endpoint-aggregator.labels" -}}
helm.sh/chart: {{ include "endpoint-aggregator.chart" . }}
{{ include "endpoint-aggregator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels of the daemon's pods.
*/}}
{{- define "endpoint-aggregator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "endpoint-aggregator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The ServiceAccount the daemon runs as and the RBAC is bound to.
*/}}
{{- define "endpoint-aggregator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "endpoint-aggregator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The container image: repository@digest, or repository:tag (default: the
chart's appVersion).
*/}}
{{- define "endpoint-aggregator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The leader election Lease name.
*/}}
{{- define "endpoint-aggregator.leaderElectionID" -}}
{{- default (include "endpoint-aggregator.fullname" .) .Values.leaderElection.id }}
{{- end }}

{{/*
The rules of an RBAC file that `make chart-sync` copies from config/rbac/
into files/rbac/ (the one source of truth for the hub RBAC; see
charts/charts_test.go). Fails when the file is missing or has no rules.
Usage: include "endpoint-aggregator.rbacRules" (list . "hub-clusterrole.yaml")
*/}}
{{- define "endpoint-aggregator.rbacRules" -}}
{{- $root := index . 0 }}
{{- $path := printf "files/rbac/%s" (index . 1) }}
{{- $rules := (fromYaml ($root.Files.Get $path)).rules }}
{{- if not $rules }}
{{- fail (printf "%s is missing or has no rules: run `make chart-sync`" $path) }}
{{- end }}
{{- toYaml $rules }}
{{- end }}

{{/*
The rules of an RBAC file (as rbacRules) cut down to the read verbs (get,
list, watch) or to the others; rules left without verbs are dropped.
Usage: include "endpoint-aggregator.rbacRulesOfVerbs" (list . "member-clusterrole.yaml" "read")
*/}}
{{- define "endpoint-aggregator.rbacRulesOfVerbs" -}}
{{- $reads := eq (index . 2) "read" }}
{{- $out := list }}
{{- range (include "endpoint-aggregator.rbacRules" (list (index . 0) (index . 1)) | fromYamlArray) }}
{{- $verbs := list }}
{{- range .verbs }}
{{- if eq (has . (list "get" "list" "watch")) $reads }}
{{- $verbs = append $verbs . }}
{{- end }}
{{- end }}
{{- if $verbs }}
{{- $out = append $out (set (deepCopy .) "verbs" $verbs) }}
{{- end }}
{{- end }}
{{- if $out }}
{{- toYaml $out }}
{{- end }}
{{- end }}
