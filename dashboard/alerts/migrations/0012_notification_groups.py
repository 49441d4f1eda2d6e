import uuid

import django.db.models.deletion
from django.db import migrations, models


def group_old_attempts(apps, schema_editor):
    """Give each transition that has delivery attempts a notification of its own, sent (processed), with the
    transition's event id, which its attempts carry: the delivery log and the alerts page's notices read on."""
    Transition = apps.get_model("alerts", "Transition")
    Notification = apps.get_model("alerts", "Notification")
    DeliveryAttempt = apps.get_model("alerts", "DeliveryAttempt")
    delivered = Transition.objects.filter(attempts__isnull=False).distinct().select_related("alert")
    for transition in delivered.iterator():
        group = Notification.objects.create(
            node=transition.alert.node, event_id=transition.event_id, created=transition.created,
            updated=transition.created, processed=transition.processed or transition.created,
        )
        Transition.objects.filter(id=transition.id).update(notification=group)
        DeliveryAttempt.objects.filter(transition_id=transition.id).update(notification=group)


class Migration(migrations.Migration):
    dependencies = [
        ('alerts', '0011_keep_firing_for'),
    ]

    operations = [
        migrations.CreateModel(
            name='Notification',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('node', models.CharField(max_length=200)),
                ('event_id', models.UUIDField(default=uuid.uuid4, unique=True)),
                ('created', models.DateTimeField()),
                ('updated', models.DateTimeField()),
                ('processed', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'ordering': ['-created', '-id'],
                'constraints': [models.UniqueConstraint(condition=models.Q(('processed', None)), fields=('node',), name='one_open_group_per_node')],
            },
        ),
        migrations.AddField(
            model_name='transition',
            name='notification',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='transitions', to='alerts.notification'),
        ),
        migrations.AddField(
            model_name='deliveryattempt',
            name='notification',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='attempts', to='alerts.notification'),
        ),
        migrations.AddField(
            model_name='deliveryattempt',
            name='alerts',
            field=models.PositiveIntegerField(default=1),
        ),
        migrations.RunPython(group_old_attempts, migrations.RunPython.noop),
        migrations.RemoveField(
            model_name='deliveryattempt',
            name='transition',
        ),
    ]
