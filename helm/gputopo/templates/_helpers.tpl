{{/*
The chart's name, for app.kubernetes.io/name.
*/}}
{{- define "gputopo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name: the release name when it already says
"gputopo" (so `helm install gputopo` names the agent gputopo-agent, as the
plain manifests in daemonset/ do), else <release>-gputopo.
*/}}
{{- define "gputopo.fullname" -}}
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

{{- define "gputopo.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "gputopo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gputopo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels of every object. The plain manifests carry the same, less the two
that only Helm sets (helm.sh/chart, app.kubernetes.io/managed-by).
*/}}
{{- define "gputopo.labels" -}}
helm.sh/chart: {{ include "gputopo.chart" . }}
{{ include "gputopo.selectorLabels" . }}
app.kubernetes.io/part-of: gputopo
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "gputopo.agent.fullname" -}}
{{- printf "%s-agent" (include "gputopo.fullname" . | trunc 57 | trimSuffix "-") }}
{{- end }}

{{- define "gputopo.agent.selectorLabels" -}}
{{ include "gputopo.selectorLabels" . }}
app.kubernetes.io/component: agent
{{- end }}

{{- define "gputopo.agent.labels" -}}
{{ include "gputopo.labels" . }}
app.kubernetes.io/component: agent
{{- end }}

{{- define "gputopo.agent.serviceAccountName" -}}
{{- if .Values.agent.serviceAccount.create }}
{{- default (include "gputopo.agent.fullname" .) .Values.agent.serviceAccount.name }}
{{- else }}
{{- required "agent.serviceAccount.name: name the existing ServiceAccount when agent.serviceAccount.create is false" .Values.agent.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gputopo.scheduler.fullname" -}}
{{- printf "%s-scheduler" (include "gputopo.fullname" . | trunc 53 | trimSuffix "-") }}
{{- end }}

{{- define "gputopo.scheduler.selectorLabels" -}}
{{ include "gputopo.selectorLabels" . }}
app.kubernetes.io/component: scheduler
{{- end }}

{{- define "gputopo.scheduler.labels" -}}
{{ include "gputopo.labels" . }}
app.kubernetes.io/component: scheduler
{{- end }}

{{- define "gputopo.scheduler.serviceAccountName" -}}
{{- if .Values.scheduler.serviceAccount.create }}
{{- default (include "gputopo.scheduler.fullname" .) .Values.scheduler.serviceAccount.name }}
{{- else }}
{{- required "scheduler.serviceAccount.name: name the existing ServiceAccount when scheduler.serviceAccount.create is false" .Values.scheduler.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "gputopo.scheduler.leaseName" -}}
{{- default (include "gputopo.scheduler.fullname" .) .Values.scheduler.leaderElection.leaseName }}
{{- end }}

{{/*
The scheduler's configuration file (docs/scheduler.md): scheduler.config as
it is (values.schema.json holds it to the file's own schema), with
schedulerNames from scheduler.schedulerName and scheduler.extraSchedulerNames.
*/}}
{{- define "gputopo.scheduler.config" -}}
{{- $config := deepCopy (.Values.scheduler.config | default dict) }}
{{- $_ := set $config "schedulerNames" (include "gputopo.scheduler.names" . | fromJsonArray) }}
{{- toYaml $config }}
{{- end }}

{{/*
Every spec.schedulerName the top-level settings serve, as a JSON array.
*/}}
{{- define "gputopo.scheduler.names" -}}
{{- concat (list .Values.scheduler.schedulerName) (.Values.scheduler.extraSchedulerNames | default list) | toJson }}
{{- end }}

{{/*
repository:tag (tag defaults to the chart's appVersion), or repository@digest.
*/}}
{{- define "gputopo.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .appVersion .image.tag) }}
{{- end }}
{{- end }}

{{/*
Value combinations that cannot work fail the render with a message, rather
than install something that silently does less.
*/}}
{{- define "gputopo.validate" -}}
{{- if and .Values.scheduler.extender.enabled (not .Values.scheduler.enabled) }}
{{- fail "scheduler.extender.enabled needs scheduler.enabled: the extender is the scheduler's Deployment running in extender mode" }}
{{- end }}
{{- if and .Values.scheduler.extender.enabled (eq (int .Values.scheduler.extender.port) (int .Values.scheduler.port)) }}
{{- fail (printf "scheduler.extender.port (%d) must differ from scheduler.port, which serves /healthz, /readyz and /metrics" (int .Values.scheduler.extender.port)) }}
{{- end }}
{{- $tls := .Values.scheduler.extender.tls }}
{{- if and .Values.scheduler.extender.enabled (not $tls.insecurePlainHTTP) (not $tls.secretName) }}
{{- fail "scheduler.extender.tls.secretName: name the Secret with the extender's serving certificate (tls.crt, tls.key) and the CA of kube-scheduler's client certificate (ca.crt); docs/extender.md (\"TLS and client certificates\") shows how to make it. (scheduler.extender.tls.insecurePlainHTTP=true serves plain HTTP without authentication: local testing only.)" }}
{{- end }}
{{- if and .Values.scheduler.extender.enabled $tls.insecurePlainHTTP (or $tls.secretName $tls.clientCASecretName) }}
{{- fail "scheduler.extender.tls.insecurePlainHTTP and scheduler.extender.tls.secretName/clientCASecretName exclude each other" }}
{{- end }}
{{- if and .Values.scheduler.existingConfigMap .Values.scheduler.config }}
{{- fail (printf "scheduler.existingConfigMap (%s) and scheduler.config exclude each other: with a ConfigMap of your own the chart renders no configuration file, so scheduler.config would be ignored; put those settings in %s's config.yaml, or unset scheduler.existingConfigMap" .Values.scheduler.existingConfigMap .Values.scheduler.existingConfigMap) }}
{{- end }}
{{- range .Values.scheduler.extraSchedulerNames }}
{{- if eq . $.Values.scheduler.schedulerName }}
{{- fail (printf "scheduler.extraSchedulerNames lists %s, which is scheduler.schedulerName already: list only the other names to serve" .) }}
{{- end }}
{{- $extra := . }}
{{- range ($.Values.scheduler.config | default dict).profiles }}
{{- if eq .schedulerName $extra }}
{{- fail (printf "scheduler.extraSchedulerNames and scheduler.config.profiles both name %s: a name is served by the top-level settings (extraSchedulerNames) or by one profile, not both" $extra) }}
{{- end }}
{{- end }}
{{- end }}
{{- with (.Values.scheduler.config | default dict).networkTiers }}
{{- if and .preset .keys }}
{{- fail "scheduler.config.networkTiers.preset and scheduler.config.networkTiers.keys exclude each other: keys name the tiers a preset would; set one" }}
{{- end }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.service.enabled) }}
{{- fail "metrics.serviceMonitor.enabled needs metrics.service.enabled: each ServiceMonitor selects its component's metrics Service (agent, scheduler, device plugin)" }}
{{- end }}
{{- $pr := .Values.agent.podResources }}
{{- if and $pr.enabled (lt (int (include "gputopo.milliseconds" $pr.heartbeat)) (int (include "gputopo.milliseconds" .Values.agent.rescanInterval))) }}
{{- fail (printf "agent.podResources.heartbeat (%s) must be at least agent.rescanInterval (%s): observedAt is refreshed only when the agent scans" $pr.heartbeat .Values.agent.rescanInterval) }}
{{- end }}
{{- end }}

{{/*
A duration as the schema allows it (1h30m, 45s, 500ms), in milliseconds.
*/}}
{{- define "gputopo.milliseconds" -}}
{{- $total := 0 }}
{{- range (regexFindAll "[0-9]+(ms|s|m|h)" (toString .) -1) }}
{{- $n := int (regexFind "^[0-9]+" .) }}
{{- $unit := regexFind "[a-z]+$" . }}
{{- $scale := get (dict "ms" 1 "s" 1000 "m" 60000 "h" 3600000) $unit }}
{{- $total = add $total (mul $n $scale) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
The extender's in-cluster URL, the KubeSchedulerConfiguration's urlPrefix.
*/}}
{{- define "gputopo.scheduler.extenderURL" -}}
{{- printf "%s://%s:%d" (ternary "http" "https" .Values.scheduler.extender.tls.insecurePlainHTTP) (include "gputopo.scheduler.extenderHost" .) (int .Values.scheduler.extender.port) }}
{{- end }}

{{/*
The extender Service's DNS name, which its serving certificate must name.
*/}}
{{- define "gputopo.scheduler.extenderHost" -}}
{{- printf "%s-extender.%s.svc" (include "gputopo.scheduler.fullname" .) .Release.Namespace }}
{{- end }}
