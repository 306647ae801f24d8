{{/*
Names and labels of the optional device plugin (device-plugin-*.yaml).
*/}}
{{- define "gputopo.devicePlugin.fullname" -}}
{{- printf "%s-device-plugin" (include "gputopo.fullname" . | trunc 49 | trimSuffix "-") }}
{{- end }}

{{- define "gputopo.devicePlugin.selectorLabels" -}}
{{ include "gputopo.selectorLabels" . }}
app.kubernetes.io/component: device-plugin
{{- end }}

{{- define "gputopo.devicePlugin.labels" -}}
{{ include "gputopo.labels" . }}
app.kubernetes.io/component: device-plugin
{{- end }}

{{- define "gputopo.devicePlugin.serviceAccountName" -}}
{{- if .Values.devicePlugin.serviceAccount.create }}
{{- default (include "gputopo.devicePlugin.fullname" .) .Values.devicePlugin.serviceAccount.name }}
{{- else }}
{{- required "devicePlugin.serviceAccount.name: name the existing ServiceAccount when devicePlugin.serviceAccount.create is false" .Values.devicePlugin.serviceAccount.name }}
{{- end }}
{{- end }}
