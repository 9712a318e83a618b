{{- define "prq.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "prq.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "prq.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "prq.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "prq.secretName" -}}
{{- .Values.existingSecret | default (include "prq.fullname" .) -}}
{{- end -}}

{{/* The environment serve and workers share. */}}
{{- define "prq.env" -}}
- name: PRQ_CONFIG
  value: /etc/prq/prq.yaml
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret | default (include "prq.secretName" .) }}
      key: {{ if .Values.redis.existingSecret }}{{ .Values.redis.existingSecretKey }}{{ else }}redis-url{{ end }}
- name: GITHUB_APP_ID
  value: {{ .Values.github.appId | quote }}
- name: GITHUB_APP_SLUG
  value: {{ .Values.github.appSlug | quote }}
- name: GITHUB_API_URL
  value: {{ .Values.github.apiUrl | quote }}
- name: GITHUB_PRIVATE_KEY_PATH
  value: /secrets/github/private-key.pem
- name: GITHUB_WEBHOOK_SECRET
  valueFrom:
    secretKeyRef: {name: {{ include "prq.secretName" . }}, key: webhook-secret}
- name: OPENAI_API_KEY
  valueFrom:
    secretKeyRef: {name: {{ include "prq.secretName" . }}, key: openai-api-key}
{{- with .Values.openai.baseUrl }}
- name: OPENAI_BASE_URL
  value: {{ . | quote }}
{{- end }}
- name: PRQ_ADMIN_TOKEN
  valueFrom:
    secretKeyRef: {name: {{ include "prq.secretName" . }}, key: admin-token}
{{- end -}}

{{- define "prq.volumes" -}}
- name: config
  configMap:
    name: {{ include "prq.fullname" . }}
- name: github-key
  secret:
    secretName: {{ include "prq.secretName" . }}
    items:
      - {key: private-key.pem, path: private-key.pem}
{{- end -}}

{{- define "prq.volumeMounts" -}}
- {name: config, mountPath: /etc/prq, readOnly: true}
- {name: github-key, mountPath: /secrets/github, readOnly: true}
{{- end -}}
